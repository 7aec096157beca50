// `day0 quantize` on the golden miniatures: the written checkpoint reloads to exactly the in-memory
// quantize -> dequantize of every projection, keeps the rest byte for byte, keeps the logits within a
// stated KL of the original, and refuses bad input without leaving anything behind.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "day0/align/logit_metrics.h"
#include "day0/core/error.h"
#include "day0/core/numeric.h"
#include "day0/io/checkpoint.h"
#include "day0/io/dequant.h"
#include "day0/model/catalog.h"
#include "day0/model/tensor_manifest.h"
#include "day0/quant/quantize_checkpoint.h"
#include "day0/runtime/int_weight.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/packed_int_source.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

std::string golden(const std::string& name) {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

// A fresh empty parent folder per test, removed at the end.
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / fmt::format("day0-quant-test-{}-{}", getpid(), counter()++);
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir), {})); }
};

QuantizeOptions options(int bits, int64_t group, bool symmetric) {
  QuantizeOptions o;
  o.bits = bits;
  o.group_size = group;
  o.symmetric = symmetric;
  return o;
}

FloatMatrix logits_of(const LoadedModel& model, const std::vector<int32_t>& ids) {
  auto h = open_engine(model, "cpu", {}, 1);
  D0_CHECK_MSG(h.is_ok(), h.status().to_string());
  KvCache cache = h->engine->new_cache();
  const SequenceStep step{&cache, ids};
  auto logits = h->engine->forward(std::span(&step, 1));
  D0_CHECK_MSG(logits.is_ok(), logits.status().to_string());
  return copy_matrix(*logits);
}

TEST(QuantizeCheckpoint, ReloadEqualsInMemoryQuantizationBitForBit) {
  for (bool symmetric : {true, false}) {
    Scratch scratch;
    const std::string out = (scratch.dir / "q").string();
    auto r = quantize_checkpoint(golden("llama3"), out, options(4, 32, symmetric));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->n_quantized, 2 * 7);  // q k v o gate up down in each of the 2 layers
    EXPECT_EQ(scratch.entries(), 1u);  // the output only: the temp folder was renamed
    EXPECT_NE(std::find(r->ignore.begin(), r->ignore.end(), "lm_head"), r->ignore.end());

    auto original = Checkpoint::open(golden("llama3"));
    ASSERT_TRUE(original.is_ok());
    auto resolved = resolve_model(out);
    ASSERT_TRUE(resolved.is_ok()) << resolved.status().to_string();
    EXPECT_EQ(resolved->spec.weights.packed, r->spec.weights.packed);
    auto packed = open_checkpoint_source(out);
    ASSERT_TRUE(packed.is_ok());
    const std::shared_ptr<const TensorSource> packed_source(std::move(*packed));
    PackedIntSource reloaded(packed_source, resolved->spec.weights.packed);
    // What a float32 run loads (LoadOptions::exact_f32_dequantized): the exact products.
    PackedIntSource reloaded_f32(packed_source, resolved->spec.weights.packed, /*exact_f32=*/true);
    auto manifest = build_tensor_manifest(resolved->spec);
    ASSERT_TRUE(manifest.is_ok());
    std::set<std::string> packed_stems;
    for (const TensorSpec& t : manifest->tensors) {
      if (t.name.ends_with(".weight_packed")) packed_stems.insert(t.name.substr(0, t.name.size() - 14));
    }
    EXPECT_EQ(packed_stems.size(), 14u);
    int64_t checked = 0;
    for (const std::string& name : original->tensor_names()) {
      auto src = original->tensor(name);
      ASSERT_TRUE(src.is_ok());
      auto back = reloaded.get(name);
      ASSERT_TRUE(back.is_ok()) << back.status().to_string();
      EXPECT_EQ(back->dtype, src->dtype) << name;
      ASSERT_EQ(back->data.size(), src->data.size()) << name;
      const bool is_packed =
          packed_stems.count(name.substr(0, name.size() - std::string(".weight").size())) != 0 &&
          name.ends_with(".weight");
      if (!is_packed) {
        EXPECT_EQ(std::memcmp(back->data.data(), src->data.data(), src->data.size()), 0)
            << name << " changed";
        continue;
      }
      auto f32 = tensor_to_f32(*src);
      ASSERT_TRUE(f32.is_ok());
      auto expect =
          quantize_roundtrip(*f32, src->shape[0], src->shape[1], options(4, 32, symmetric), src->dtype);
      ASSERT_TRUE(expect.is_ok());
      const std::vector<uint16_t> expect_bf16 = f32_to_bf16_vector(*expect);
      EXPECT_EQ(std::memcmp(back->data.data(), expect_bf16.data(), back->data.size()), 0) << name;
      auto exact = reloaded_f32.get(name);
      ASSERT_TRUE(exact.is_ok()) << exact.status().to_string();
      EXPECT_EQ(exact->dtype, DType::kF32) << name;
      ASSERT_EQ(exact->data.size(), expect->size() * sizeof(float)) << name;
      EXPECT_EQ(std::memcmp(exact->data.data(), expect->data(), exact->data.size()), 0) << name;
      // And it did change: the test would pass vacuously on a copy.
      EXPECT_NE(std::memcmp(back->data.data(), src->data.data(), src->data.size()), 0) << name;
      ++checked;
    }
    EXPECT_EQ(checked, 14);
  }
}

// KL(original || quantized) of the next-token distributions over 48 positions of the golden Llama
// miniature. To second order KL = 1/2 Var_p(delta logit), and the logit change is linear in the
// weight error, whose size is the quantization step: KL grows as step^2. int8 per group of 64 has a
// step of amax / 127 (measured KL mean 5.7e-4: bound 2e-3); int4 per group of 32 has amax / 7, so
// (127 / 7)^2 = 329 times that (measured 0.15 symmetric, 0.11 asymmetric, whose step is range / 15:
// bound 0.4). These miniatures have random weights of std 0.16, far more sensitive than a trained
// model (where int4 g32 KL is of order 1e-2). A misread packing (wrong nibble order, offset or scale)
// gives KL of order 1 and more, and breaks the step^2 ratio, which is checked too.
TEST(QuantizeCheckpoint, LogitsStayWithinTheStatedKl) {
  auto base = load_model(golden("llama3"));
  ASSERT_TRUE(base.is_ok()) << base.status().to_string();
  std::vector<int32_t> ids(48);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % 256);
  const FloatMatrix ref = logits_of(*base, ids);
  struct Case {
    int bits;
    int64_t group;
    bool symmetric;
    double bound;
  };
  std::vector<double> kl;
  for (const Case& c : {Case{8, 64, true, 2e-3}, Case{4, 32, true, 0.4}, Case{4, 32, false, 0.4}}) {
    Scratch scratch;
    const std::string out = (scratch.dir / "q").string();
    auto r = quantize_checkpoint(golden("llama3"), out, options(c.bits, c.group, c.symmetric));
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    auto quantized = load_model(out);
    ASSERT_TRUE(quantized.is_ok()) << quantized.status().to_string();
    const FloatMatrix got = logits_of(*quantized, ids);
    LogitAccumulator acc;
    const std::vector<int64_t> ids64(ids.begin(), ids.end());
    acc.add_prompt(ref, got, ids64);
    const LogitSummary s = acc.summary();
    std::printf("int%d g%lld %s: KL mean %.3g max %.3g, same top-1 %.3f\n", c.bits,
                static_cast<long long>(c.group), c.symmetric ? "sym" : "asym", s.kl_mean, s.kl_max,
                s.same_top1);
    EXPECT_LT(s.kl_mean, c.bound);
    EXPECT_GT(s.kl_mean, 0.0);  // the weights really changed
    kl.push_back(s.kl_mean);
  }
  ASSERT_EQ(kl.size(), 3u);
  const double ratio = kl[1] / kl[0], expected = (127.0 / 7.0) * (127.0 / 7.0);
  EXPECT_GT(ratio, expected / 4) << "int4 / int8 KL ratio";
  EXPECT_LT(ratio, expected * 4) << "int4 / int8 KL ratio";
}

TEST(QuantizeCheckpoint, GroupThatDoesNotDivideARowNamesTheTensorAndLeavesNothing) {
  // Qwen3 miniature: head_dim 24 x 4 heads = 96 input columns of o_proj; 64 does not divide them.
  Scratch scratch;
  const std::string out = (scratch.dir / "q").string();
  auto r = quantize_checkpoint(golden("qwen3"), out, options(4, 64, true));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("self_attn.o_proj.weight"), std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("96 columns"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(scratch.entries(), 0u);
  // Skipping the offending projections makes it valid.
  QuantizeOptions o = options(4, 64, true);
  o.skip = {"*.o_proj"};
  auto ok = quantize_checkpoint(golden("qwen3"), out, o);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_NE(std::find(ok->ignore.begin(), ok->ignore.end(), "model.layers.0.self_attn.o_proj"),
            ok->ignore.end());
  auto loaded = load_model(out);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
}

TEST(QuantizeCheckpoint, RefusesBadRequests) {
  Scratch scratch;
  const fs::path busy = scratch.dir / "busy";
  fs::create_directories(busy / "x");
  auto r = quantize_checkpoint(golden("llama3"), busy.string(), options(4, 32, true));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("not an empty directory"), std::string::npos);
  auto q = quantize_checkpoint(golden("llama3"), (scratch.dir / "a").string(), options(4, 32, true));
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  auto again =
      quantize_checkpoint((scratch.dir / "a").string(), (scratch.dir / "b").string(), options(4, 32, true));
  ASSERT_FALSE(again.is_ok());
  EXPECT_NE(again.status().message().find("already quantized"), std::string::npos)
      << again.status().to_string();
  auto group = quantize_checkpoint(golden("llama3"), (scratch.dir / "c").string(), options(4, 48, true));
  ASSERT_FALSE(group.is_ok());
  EXPECT_NE(group.status().message().find("--group 48"), std::string::npos);
}

// tests/golden/llama3 through `day0 quantize --to int4 --group 32` into a scratch folder, opened.
struct QuantizedLlama3 {
  Scratch scratch;
  PackedIntSpec packed;
  std::shared_ptr<const TensorSource> source;
  explicit QuantizedLlama3(bool symmetric) {
    const std::string out = (scratch.dir / "q").string();
    auto written = quantize_checkpoint(golden("llama3"), out, options(4, 32, symmetric));
    D0_CHECK_MSG(written.is_ok(), written.status().to_string());
    auto resolved = resolve_model(out);
    D0_CHECK_MSG(resolved.is_ok(), resolved.status().to_string());
    packed = resolved->spec.weights.packed;
    auto disk = open_checkpoint_source(out);
    D0_CHECK_MSG(disk.is_ok(), disk.status().to_string());
    source = std::move(*disk);
  }
};

// A kept INT projection holds the scales the checkpoint stores (BF16 here: `day0 quantize` writes them
// in the weight's dtype) as those 16-bit values, half the bytes of float32, and dequantizes to exactly
// the float32 weight a float32 run loads.
TEST(PackedIntSource, KeptProjectionsHoldTheCheckpointsBf16Scales) {
  const QuantizedLlama3 q(true);
  PackedIntSource kept(q.source, q.packed, /*exact_f32=*/false, /*keep_int=*/true);
  PackedIntSource exact(q.source, q.packed, /*exact_f32=*/true);
  int checked = 0;
  for (const std::string layer : {"0", "1"}) {
    for (const std::string module : {"self_attn.q_proj", "mlp.down_proj"}) {
      const std::string name = "model.layers." + layer + "." + module + ".weight";
      auto w = kept.int_weight(name);
      ASSERT_TRUE(w.is_ok() && *w != nullptr) << name;
      const WeightView v = (*w)->view();
      EXPECT_EQ(v.int_scale_type, ScaleType::kBF16) << name;
      EXPECT_EQ((*w)->scales.size(), static_cast<size_t>(2 * v.rows * v.int_groups())) << name;
      auto f32 = exact.get(name);
      ASSERT_TRUE(f32.is_ok()) << f32.status().to_string();
      const auto* want = reinterpret_cast<const float*>(f32->data.data());
      int64_t differ = 0;
      for (int64_t i = 0; i < v.rows; ++i)
        for (int64_t j = 0; j < v.cols; ++j) differ += v.at(i, j) != want[i * v.cols + j];
      EXPECT_EQ(differ, 0) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
}

// INT4 scales are kept in the narrowest type that holds every one exactly: BF16, else F16, else
// float32; INT8 scales stay float32.
TEST(PackedIntSource, RepackKeepsScalesInTheNarrowestExactType) {
  const auto repacked = [](float scale, int bits = 4) {
    IntCodes c;
    c.bits = bits;
    c.rows = 2;
    c.cols = 64;
    c.groups = 2;
    c.q.assign(128, 3);
    c.scale = {0.5f, -0.25f, 2.0f, scale};
    c.zero.assign(4, 0.0f);
    c.group_of.resize(64);
    for (int k = 0; k < 64; ++k) c.group_of[static_cast<size_t>(k)] = k / 32;
    auto w = repack_int_weight(c);
    D0_CHECK_MSG(w.is_ok(), w.status().to_string());
    return std::move(w).value();
  };
  const IntWeight bf16 = repacked(0.125f), f16 = repacked(1.0f + 0x1p-9f), f32 = repacked(0.1f);
  EXPECT_EQ(bf16.scale_type, ScaleType::kBF16);
  EXPECT_EQ(f16.scale_type, ScaleType::kF16);  // 10 mantissa bits: F16 holds it, BF16 does not
  EXPECT_EQ(f32.scale_type, ScaleType::kF32);
  EXPECT_EQ(bf16.scales.size(), 8u);
  EXPECT_EQ(f32.scales.size(), 16u);
  for (const IntWeight* w : {&bf16, &f16, &f32}) {
    const WeightView v = w->view();
    EXPECT_EQ(v.at(0, 0), (3 + 8 - 8) * 0.5f);  // signed code 3 -> nibble 11, zero 8
    EXPECT_EQ(v.at(1, 40), 3 * v.int_scale(3));
  }
  EXPECT_EQ(f16.view().int_scale(3), 1.0f + 0x1p-9f);
  const IntWeight int8 = repacked(0.125f, 8);
  EXPECT_EQ(int8.scale_type, ScaleType::kF32);
  EXPECT_EQ(int8.view().at(1, 40), 3 * 0.125f);
  EXPECT_EQ(f32.view().int_scale(3), 0.1f);
}

TEST(PackedIntSource, BadPackedTensorsAreClearErrors) {
  const QuantizedLlama3 q(false);
  const std::string stem = "model.layers.1.mlp.down_proj";
  const PackedIntSpec& p = q.packed;
  auto mem = MemoryTensorSource::copy_of(*q.source);
  ASSERT_TRUE(mem.is_ok());
  auto edited = [&](auto edit) {
    auto copy = MemoryTensorSource::copy_of(**mem);
    D0_CHECK(copy.is_ok());
    edit(**copy);
    PackedIntSource src(std::shared_ptr<const TensorSource>(std::move(*copy)), p);
    return src.get(stem + ".weight");
  };
  {
    auto t = edited([&](MemoryTensorSource& m) {
      auto w = m.get(stem + ".weight_packed");
      m.put(stem + ".weight_packed", DType::kI32, {w->shape[0], w->shape[1] - 1},
            std::vector<uint8_t>(static_cast<size_t>(w->shape[0] * (w->shape[1] - 1) * 4)));
    });
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find(stem + ".weight_packed: expected shape [64, 16], found [64, 15]"),
              std::string::npos)
        << t.status().to_string();
  }
  {
    auto t = edited([&](MemoryTensorSource& m) {
      m.put(stem + ".weight_shape", DType::kI64, {2}, std::vector<uint8_t>(16, 0));
    });
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find("weight_shape: holds [0, 0]"), std::string::npos)
        << t.status().to_string();
  }
  {
    auto t = edited([&](MemoryTensorSource& m) {
      auto z = m.get(stem + ".weight_zero_point");
      m.put(stem + ".weight_zero_point", DType::kI8, z->shape,
            std::vector<uint8_t>(z->data.begin(), z->data.end()));
    });
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find("expected dtype I32, found I8"), std::string::npos)
        << t.status().to_string();
  }
  // Intact, it hides the packed tensors and shows the plain one.
  PackedIntSource intact(std::shared_ptr<const TensorSource>(std::move(*mem)), p);
  EXPECT_TRUE(intact.contains(stem + ".weight"));
  EXPECT_FALSE(intact.contains(stem + ".weight_packed"));
  auto names = intact.names();
  EXPECT_NE(std::find(names.begin(), names.end(), stem + ".weight"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), stem + ".weight_scale"), names.end());
}

}  // namespace
}  // namespace day0
