// GPTQ (qweight / qzeros / scales / g_idx) and AWQ GEMM (qweight / qzeros / scales) 4-bit checkpoints:
// hand-worked words, tiny checkpoints written by the test's own packer (checked against those words)
// dequantized by the loader to exactly their F32 twins, and a whole miniature whose GPTQ and AWQ
// versions give the same logits as its dequantized F32 twin.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/core/error.h"
#include "day0/core/numeric.h"
#include "day0/io/checkpoint.h"
#include "day0/io/dequant.h"
#include "day0/io/safetensors_writer.h"
#include "day0/model/catalog.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/packed_int_source.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

// The two layouts, written from their descriptions (weights W [out, in] as Hugging Face stores them):
//  GPTQ: qweight[i / 8, o] nibble i % 8 = q[o, i]; qzeros[g, o / 8] nibble o % 8 = z[g, o] - 1 (v1);
//        scales [groups, out]; g_idx[i] = group of input i.
//  AWQ:  qweight[i, o / 8] nibble k = q[o, 8 * (o / 8) + order[k]], order = 0 2 4 6 1 3 5 7;
//        qzeros[g, o / 8] the same order; scales [groups, out].
//  W[o, i] = (q[o, i] - z[g(i), o]) * s[g(i), o].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

struct IntWeight {
  int64_t out = 0, in = 0, group = 0;
  std::vector<int> q;        // [out, in], 0..15
  std::vector<int> zero;     // [groups, out], 0..15 (the real zero point)
  std::vector<float> scale;  // [groups, out], F16-exact
  std::vector<float> twin() const {
    std::vector<float> w(static_cast<size_t>(out * in));
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        const size_t g = static_cast<size_t>((i / group) * out + o);
        w[static_cast<size_t>(o * in + i)] =
            static_cast<float>(q[static_cast<size_t>(o * in + i)] - zero[g]) * scale[g];
      }
    }
    return w;
  }
};

std::vector<int32_t> gptq_qweight(const IntWeight& w) {
  std::vector<int32_t> out(static_cast<size_t>((w.in / 8) * w.out), 0);
  for (int64_t i = 0; i < w.in; ++i) {
    for (int64_t o = 0; o < w.out; ++o) {
      auto& word = out[static_cast<size_t>((i / 8) * w.out + o)];
      word = static_cast<int32_t>(
          static_cast<uint32_t>(word) |
          (static_cast<uint32_t>(w.q[static_cast<size_t>(o * w.in + i)]) << (4 * (i % 8))));
    }
  }
  return out;
}

std::vector<int32_t> pack_out_dim(const std::vector<int>& v, int64_t rows, int64_t cols, bool awq,
                                  int offset) {
  std::vector<int32_t> out(static_cast<size_t>(rows * (cols / 8)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c8 = 0; c8 < cols / 8; ++c8) {
      uint32_t word = 0;
      for (int k = 0; k < 8; ++k) {
        const int64_t c = c8 * 8 + (awq ? kAwqOrder[k] : k);
        word |= static_cast<uint32_t>(v[static_cast<size_t>(r * cols + c)] + offset) << (4 * k);
      }
      out[static_cast<size_t>(r * (cols / 8) + c8)] = static_cast<int32_t>(word);
    }
  }
  return out;
}

// q as [in, out] (the AWQ orientation).
std::vector<int> transposed(const IntWeight& w) {
  std::vector<int> t(w.q.size());
  for (int64_t o = 0; o < w.out; ++o) {
    for (int64_t i = 0; i < w.in; ++i)
      t[static_cast<size_t>(i * w.out + o)] = w.q[static_cast<size_t>(o * w.in + i)];
  }
  return t;
}

std::vector<uint8_t> bytes_of(const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_f16(v[i]);
    std::memcpy(b.data() + i * 2, &h, 2);
  }
  return b;
}

void put_gptq(MemoryTensorSource& m, const std::string& stem, const IntWeight& w) {
  const int64_t groups = w.in / w.group;
  m.put(stem + ".qweight", DType::kI32, {w.in / 8, w.out}, bytes_of(gptq_qweight(w)));
  m.put(stem + ".qzeros", DType::kI32, {groups, w.out / 8},
        bytes_of(pack_out_dim(w.zero, groups, w.out, false, -1)));
  m.put(stem + ".scales", DType::kF16, {groups, w.out}, f16_bytes(w.scale));
  std::vector<int32_t> g_idx(static_cast<size_t>(w.in));
  for (int64_t i = 0; i < w.in; ++i) g_idx[static_cast<size_t>(i)] = static_cast<int32_t>(i / w.group);
  m.put(stem + ".g_idx", DType::kI32, {w.in}, bytes_of(g_idx));
}

void put_awq(MemoryTensorSource& m, const std::string& stem, const IntWeight& w) {
  const int64_t groups = w.in / w.group;
  m.put(stem + ".qweight", DType::kI32, {w.in, w.out / 8},
        bytes_of(pack_out_dim(transposed(w), w.in, w.out, true, 0)));
  m.put(stem + ".qzeros", DType::kI32, {groups, w.out / 8},
        bytes_of(pack_out_dim(w.zero, groups, w.out, true, 0)));
  m.put(stem + ".scales", DType::kF16, {groups, w.out}, f16_bytes(w.scale));
}

IntWeight random_weight(int64_t out, int64_t in, int64_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> nibble(0, 15);
  std::uniform_int_distribution<int> mantissa(1, 255);
  IntWeight w{out, in, group, {}, {}, {}};
  for (int64_t k = 0; k < out * in; ++k) w.q.push_back(nibble(rng));
  for (int64_t k = 0; k < (in / group) * out; ++k) {
    w.zero.push_back(nibble(rng) % 15 + 1);  // 1..15: the v1 format stores z - 1 >= 0
    w.scale.push_back(std::ldexp(static_cast<float>(mantissa(rng)), -14));  // F16-exact
  }
  return w;
}

TEST(GptqAwqLayout, HandWorkedWords) {
  // One output row o = 0 with q[0, i] = i + 1 for inputs 0..7: GPTQ packs along the inputs.
  IntWeight w{8, 8, 8, {}, std::vector<int>(8, 8), std::vector<float>(8, 0.5f)};
  w.q.assign(64, 0);
  for (int i = 0; i < 8; ++i) w.q[static_cast<size_t>(i)] = i + 1;
  EXPECT_EQ(static_cast<uint32_t>(gptq_qweight(w)[0]), 0x87654321u);
  EXPECT_EQ(static_cast<uint32_t>(pack_out_dim(w.zero, 1, 8, false, -1)[0]),
            0x77777777u);  // z = 8 stored as 7
  // AWQ packs along the outputs in the order 0 2 4 6 1 3 5 7: columns 0..7 holding 0..7 give 0x75316420.
  const std::vector<int> cols = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(static_cast<uint32_t>(pack_out_dim(cols, 1, 8, true, 0)[0]), 0x75316420u);
  // The loader reads the hand-worked GPTQ words back: W[0, i] = (i + 1 - 8) * 0.5.
  MemoryTensorSource m;
  put_gptq(m, "x", w);
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  const PackedIntSpec gptq{4, 8, false, {"Linear"}, {}, PackedIntLayout::kGptq, true};
  auto out = dequantize_packed_weight(m, "x", gptq, shape, dtype);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(shape, std::vector<int64_t>({8, 8}));
  EXPECT_EQ(std::vector<float>(out->begin(), out->begin() + 8),
            std::vector<float>({-3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f, 0.0f}));
}

TEST(GptqAwqLayout, TinyCheckpointsMatchTheirF32Twins) {
  const IntWeight w = random_weight(16, 64, 32, 5);
  const std::vector<float> twin = w.twin();
  for (PackedIntLayout layout : {PackedIntLayout::kGptq, PackedIntLayout::kAwq}) {
    MemoryTensorSource m;
    if (layout == PackedIntLayout::kGptq) {
      put_gptq(m, "model.layers.0.mlp.up_proj", w);
    } else {
      put_awq(m, "model.layers.0.mlp.up_proj", w);
    }
    m.put("model.norm.weight", DType::kF32, {4}, std::vector<uint8_t>(16, 0));
    const PackedIntSpec spec{4, 32, false, {"Linear"}, {}, layout, layout == PackedIntLayout::kGptq};
    PackedIntSource src(std::make_shared<MemoryTensorSource>(std::move(m)), spec);
    auto t = src.get("model.layers.0.mlp.up_proj.weight");
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(t->dtype, DType::kF32);
    EXPECT_EQ(t->shape, std::vector<int64_t>({16, 64}));
    std::vector<float> got(twin.size());
    std::memcpy(got.data(), t->data.data(), got.size() * 4);
    EXPECT_EQ(got, twin) << static_cast<int>(layout);
    EXPECT_FALSE(src.contains("model.layers.0.mlp.up_proj.qweight"));
    EXPECT_TRUE(src.contains("model.norm.weight"));
  }
}

TEST(GptqAwqLayout, BadTensorsAreClearErrors) {
  const IntWeight w = random_weight(16, 64, 32, 9);
  MemoryTensorSource m;
  put_gptq(m, "p", w);
  m.put("p.scales", DType::kF16, {3, 16}, std::vector<uint8_t>(96, 0));
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  const PackedIntSpec gptq{4, 32, false, {"Linear"}, {}, PackedIntLayout::kGptq, true};
  auto bad = dequantize_packed_weight(m, "p", gptq, shape, dtype);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("p.scales: expected shape [2, 16]"), std::string::npos)
      << bad.status().to_string();
  MemoryTensorSource m2;
  put_gptq(m2, "p", w);
  std::vector<int32_t> g_idx(64, 5);  // group 5 of 2
  m2.put("p.g_idx", DType::kI32, {64}, bytes_of(g_idx));
  auto bad_idx = dequantize_packed_weight(m2, "p", gptq, shape, dtype);
  ASSERT_FALSE(bad_idx.is_ok());
  EXPECT_NE(bad_idx.status().message().find("p.g_idx"), std::string::npos) << bad_idx.status().to_string();
}

// The golden Llama miniature rewritten as GPTQ and as AWQ (every projection replaced by random 4-bit
// values, zero points and F16 scales) and as their F32 twin: the manifest, `verify` and the loader
// accept each, and the three give the same logits.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / fmt::format("day0-gptq-test-{}", getpid());
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

Status write_variant(const std::string& golden, const fs::path& out, PackedIntLayout layout) {
  auto resolved = resolve_model(golden);
  D0_RETURN_IF_ERROR(resolved.status());
  auto manifest = build_tensor_manifest(resolved->spec);
  D0_RETURN_IF_ERROR(manifest.status());
  auto ckpt = Checkpoint::open(golden);
  D0_RETURN_IF_ERROR(ckpt.status());
  MemoryTensorSource m;
  uint32_t seed = 1;
  for (const TensorSpec& t : manifest->tensors) {
    auto view = ckpt->tensor(t.name);
    D0_RETURN_IF_ERROR(view.status());
    if (t.storage != WeightStorage::kProjection) {
      auto f32 = tensor_to_f32(*view);
      D0_RETURN_IF_ERROR(f32.status());
      std::vector<uint8_t> b(f32->size() * 4);
      std::memcpy(b.data(), f32->data(), b.size());
      m.put(t.name, DType::kF32, t.shape, std::move(b));
      continue;
    }
    const IntWeight w = random_weight(t.shape[0], t.shape[1], 32, seed++);
    const std::string stem = t.name.substr(0, t.name.size() - 7);
    if (layout == PackedIntLayout::kGptq) {
      put_gptq(m, stem, w);
    } else if (layout == PackedIntLayout::kAwq) {
      put_awq(m, stem, w);
    } else {
      const std::vector<float> twin = w.twin();
      std::vector<uint8_t> b(twin.size() * 4);
      std::memcpy(b.data(), twin.data(), b.size());
      m.put(t.name, DType::kF32, t.shape, std::move(b));
    }
  }
  fs::create_directories(out);
  SafetensorsWriter writer;
  for (const auto& name : m.names()) {
    auto t = m.get(name);
    D0_RETURN_IF_ERROR(writer.add(tensor_bytes(name, t->dtype, t->shape, {t->data.begin(), t->data.end()})));
  }
  D0_RETURN_IF_ERROR(writer.write((out / "model.safetensors").string()));
  std::ifstream in(golden + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["torch_dtype"] = "float32";
  if (layout == PackedIntLayout::kGptq) {
    config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4},    {"group_size", 32},
                                     {"desc_act", false},      {"sym", false}, {"checkpoint_format", "gptq"}};
  } else if (layout == PackedIntLayout::kAwq) {
    config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4},
                                     {"group_size", 32},      {"zero_point", true},
                                     {"version", "gemm"},     {"modules_to_not_convert", nullptr}};
  }
  std::ofstream(out / "config.json") << config.dump(2);
  return Status::ok();
}

TEST(GptqAwqLayout, MiniatureGivesTheLogitsOfItsF32Twin) {
  Scratch scratch;
  const std::string golden = std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";
  std::vector<int32_t> ids = {3, 17, 42, 99, 7, 250, 1, 64};
  std::vector<std::vector<float>> logits;
  for (PackedIntLayout layout :
       {PackedIntLayout::kCompressedTensors, PackedIntLayout::kGptq, PackedIntLayout::kAwq}) {
    const fs::path out = scratch.dir / fmt::format("v{}", static_cast<int>(layout));
    ASSERT_TRUE(write_variant(golden, out, layout).is_ok());
    auto model = load_model(out.string());
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    auto h = open_engine(*model, "cpu", {}, 1);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    KvCache cache = h->engine->new_cache();
    const SequenceStep step{&cache, ids};
    auto l = h->engine->forward(std::span(&step, 1));
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    logits.emplace_back(l->data, l->data + l->rows * l->cols);
    if (layout != PackedIntLayout::kCompressedTensors) {
      auto resolved = resolve_model(out.string());
      ASSERT_TRUE(resolved.is_ok()) << resolved.status().to_string();
      EXPECT_EQ(resolved->spec.weights.packed.layout, layout);
      auto manifest = build_tensor_manifest(resolved->spec);
      ASSERT_TRUE(manifest.is_ok());
      auto ckpt = Checkpoint::open(out.string());
      ASSERT_TRUE(ckpt.is_ok());
      // The weight table names exactly the tensors written, with their shapes.
      EXPECT_EQ(manifest->tensors.size(), ckpt->tensor_names().size());
      for (const TensorSpec& t : manifest->tensors) {
        auto v = ckpt->tensor(t.name);
        ASSERT_TRUE(v.is_ok()) << t.name;
        EXPECT_EQ(std::vector<int64_t>(v->shape.begin(), v->shape.end()), t.shape) << t.name;
        EXPECT_TRUE(t.accepts(v->dtype)) << t.name << " " << dtype_name(v->dtype);
      }
    }
  }
  ASSERT_EQ(logits.size(), 3u);
  EXPECT_EQ(logits[1], logits[0]) << "GPTQ";
  EXPECT_EQ(logits[2], logits[0]) << "AWQ";
}

}  // namespace
}  // namespace day0
