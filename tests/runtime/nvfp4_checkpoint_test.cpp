// NVFP4 checkpoints in both layouts that ship them (ModelOpt: weight / weight_scale / weight_scale_2 /
// input_scale; compressed-tensors nvfp4-pack-quantized: weight_packed / weight_scale /
// weight_global_scale, a divisor), written here from a synthesized F32 miniature: the projections
// quantized (quantize_nvfp4), the rest copied. Beside each, the same model with those projections
// dequantized to F32 (dequant_nvfp4 with the layout's global-scale reading). The engine's logits on the
// NVFP4 checkpoint, on the reference backend and the cpu backend at every SIMD level, agree with the
// dequantized F32 model's to float rounding; verify passes on the manifest (inspect's bytes are the
// file's: 4 bits a parameter plus one E4M3 byte per 16), and verify --values finds a NaN group scale.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/backends/backend.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/io/checkpoint.h"
#include "day0/io/checkpoint_verify.h"
#include "day0/io/dequant.h"
#include "day0/io/hash_manifest.h"
#include "day0/io/quantize.h"
#include "day0/io/safetensors_writer.h"
#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/config_writer.h"
#include "day0/model/model_memory.h"
#include "day0/model/nvfp4_config.h"
#include "day0/model/param_count.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_loader.h"
#include "day0/synth/synth_checkpoint.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

struct TempFolder {
  fs::path path;
  explicit TempFolder(const std::string& name)
      : path(fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempFolder() { fs::remove_all(path); }
};

std::vector<float> logits_of(const fs::path& dir, const std::string& backend, std::optional<SimdLevel> simd) {
  auto model = load_model(dir.string(), load_options_for(ActivationPrecision::kF32));
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  if (!model.is_ok()) return {};
  BackendOptions bo;
  bo.n_threads = 2;
  bo.quiet = true;
  bo.simd = simd;
  auto be = open_backend(backend, bo);
  EXPECT_TRUE(be.is_ok());
  if (!be.is_ok()) return {};
  auto engine = Engine::create(model->spec, model->weights, **be, EngineOptions{});
  EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
  if (!engine.is_ok()) return {};
  KvCache cache = (*engine)->new_cache();
  const std::vector<int32_t> prompt = {3, 7, 11, 5, 9};
  const SequenceStep step{&cache, prompt};
  auto out = (*engine)->forward(std::span(&step, 1), false);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  if (!out.is_ok()) return {};
  std::vector<float> v;
  for (int64_t r = 0; r < out->rows; ++r) v.insert(v.end(), out->row(r), out->row(r) + out->cols);
  return v;
}

std::vector<uint8_t> float_bytes(float v) {
  std::vector<uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}

void write_config(const ModelSpec& spec, const fs::path& dir) {
  std::ofstream(dir / "config.json") << to_hf_config(spec).dump(2) << "\n";
}

// The F32 miniature every variant starts from, synthesized into `dir`.
struct Base {
  ModelSpec spec;
  fs::path dir;
};

ModelSpec synth_base(const fs::path& dir) {
  ModelSpec full = catalog_model("llama-3.1-8b").value();
  full.activation_dtype = DType::kF32;
  full.weights.format = WeightFormat::kF32;
  SynthOptions options;
  options.seed = 5;
  options.n_shards = 1;
  options.mtp_layers = false;
  options.init_std = 0.05f;
  auto written = synthesize_miniature(full, {}, options, dir.string());
  EXPECT_TRUE(written.is_ok()) << written.status().to_string();
  return written.is_ok() ? written->spec : ModelSpec{};
}

// Writes `nvfp4` (the spec with its NVFP4 scheme) to `quantized` and the dequantized F32 model to `plain`.
void write_variants(const Base& base, const ModelSpec& nvfp4, const fs::path& quantized,
                    const fs::path& plain) {
  auto src = Checkpoint::open(base.dir.string());
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  auto manifest = build_tensor_manifest(nvfp4);
  ASSERT_TRUE(manifest.is_ok()) << manifest.status().to_string();
  const Nvfp4Layout layout = nvfp4.weights.nvfp4.layout;
  const Nvfp4GlobalScale convention =
      layout == Nvfp4Layout::kCompressedTensors ? Nvfp4GlobalScale::kDivisor : Nvfp4GlobalScale::kMultiplier;
  SafetensorsWriter q, p;
  int quantized_count = 0;
  for (const TensorSpec& t : manifest->tensors) {
    if (t.storage == WeightStorage::kNvfp4Scale) continue;  // written with its values below
    if (t.storage != WeightStorage::kFp4Packed) {
      auto view = src->tensor(t.name);
      ASSERT_TRUE(view.is_ok()) << t.name;
      auto values = tensor_to_f32(*view);
      ASSERT_TRUE(values.is_ok());
      const std::vector<int64_t> shape(view->shape.begin(), view->shape.end());
      ASSERT_TRUE(q.add(tensor_f32(t.name, shape, *values)).is_ok());
      ASSERT_TRUE(p.add(tensor_f32(t.name, shape, *values)).is_ok());
      continue;
    }
    std::string stem = t.name.substr(0, t.name.rfind('.'));
    const std::string weight = stem + ".weight";
    auto view = src->tensor(weight);
    ASSERT_TRUE(view.is_ok()) << weight;
    auto values = tensor_to_f32(*view);  // [rows, cols]
    ASSERT_TRUE(values.is_ok());
    const int64_t rows = view->shape[0], cols = view->shape[1];
    const Nvfp4Quantized code = quantize_nvfp4(*values);
    const float stored =
        convention == Nvfp4GlobalScale::kDivisor ? 1.0f / code.global_multiplier : code.global_multiplier;
    const Nvfp4TensorNames names = nvfp4_tensor_names(layout, stem);
    const std::vector<int64_t> scalar =
        layout == Nvfp4Layout::kModelOpt ? std::vector<int64_t>{} : std::vector<int64_t>{1};
    ASSERT_TRUE(q.add(tensor_bytes(names.values, DType::kU8, {rows, cols / 2}, code.packed)).is_ok());
    ASSERT_TRUE(q.add(tensor_bytes(names.scales, DType::kF8E4M3, {rows, cols / 16}, code.scales)).is_ok());
    ASSERT_TRUE(q.add(tensor_bytes(names.global_scale, DType::kF32, scalar, float_bytes(stored))).is_ok());
    if (nvfp4.weights.nvfp4.activation_scales) {  // finite, never applied: any value gives the same logits
      ASSERT_TRUE(q.add(tensor_bytes(names.input_scale, DType::kF32, scalar, float_bytes(0.375f))).is_ok());
    }
    std::vector<float> dequantized(static_cast<size_t>(rows * cols));  // [rows, cols]
    dequant_nvfp4(code.packed, code.scales, nvfp4_global_multiplier(stored, convention), dequantized);
    // The quantization is real: the dequantized weight is near, not equal to, the draw.
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < dequantized.size(); ++i) {
      err2 += std::pow(dequantized[i] - (*values)[i], 2);
      ref2 += std::pow((*values)[i], 2);
    }
    EXPECT_GT(err2, 0.0) << weight;
    EXPECT_LT(err2 / ref2, 0.02) << weight;
    ASSERT_TRUE(p.add(tensor_f32(weight, {rows, cols}, std::move(dequantized))).is_ok());
    ++quantized_count;
  }
  EXPECT_GT(quantized_count, 4 * static_cast<int>(nvfp4.n_layers));  // q k v o at least
  for (const auto& entry : fs::directory_iterator(base.dir)) {
    const std::string file = entry.path().filename().string();
    if (file.find(".safetensors") != std::string::npos || file == kSha256SumsName || file == "config.json")
      continue;
    fs::copy_file(entry.path(), quantized / file);
    fs::copy_file(entry.path(), plain / file);
  }
  ASSERT_TRUE(q.write((quantized / "model.safetensors").string()).is_ok());
  ASSERT_TRUE(p.write((plain / "model.safetensors").string()).is_ok());
  write_config(nvfp4, quantized);
  write_config(base.spec, plain);
}

void expect_nvfp4_end_to_end(const Base& base, const nlohmann::json& quantization_config,
                             Nvfp4Layout layout) {
  nlohmann::json config = to_hf_config(base.spec);
  config["quantization_config"] = quantization_config;
  auto nvfp4 = parse_model_config(config, "nvfp4 config.json");
  ASSERT_TRUE(nvfp4.is_ok()) << nvfp4.status().to_string();
  ASSERT_EQ(nvfp4->weights.nvfp4.layout, layout);
  const std::string tag = layout == Nvfp4Layout::kModelOpt ? "modelopt" : "ct";
  TempFolder quantized("day0-nvfp4-" + tag), plain("day0-nvfp4-plain-" + tag);
  write_variants(base, *nvfp4, quantized.path, plain.path);
  if (::testing::Test::HasFatalFailure()) return;

  // The written config reads back as the same scheme.
  auto reparsed = load_model_config(quantized.path / "config.json");
  ASSERT_TRUE(reparsed.is_ok()) << reparsed.status().to_string();
  EXPECT_TRUE(reparsed->weights.nvfp4 == nvfp4->weights.nvfp4);

  // verify against the manifest; every tensor's bytes are the file's.
  auto manifest = build_tensor_manifest(*nvfp4);
  ASSERT_TRUE(manifest.is_ok());
  VerifyOptions verify;
  verify.manifest = &*manifest;
  verify.check_values = true;
  auto report = verify_checkpoint(quantized.path.string(), verify);
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_EQ(report->n_failed(), 0) << format_verify_report(*report, 5);
  auto ckpt = Checkpoint::open(quantized.path.string());
  ASSERT_TRUE(ckpt.is_ok());
  uint64_t nibble_bytes = 0, scale_bytes = 0;
  int64_t nvfp4_params = 0;
  for (const TensorSpec& t : manifest->tensors) {
    auto view = ckpt->tensor(t.name);
    ASSERT_TRUE(view.is_ok()) << t.name;
    EXPECT_EQ(t.bytes, view->data.size()) << t.name;
    if (t.storage == WeightStorage::kFp4Packed) {
      nibble_bytes += t.bytes;
      nvfp4_params += t.params;
    } else if (t.storage == WeightStorage::kNvfp4Scale && t.dtype == DType::kF8E4M3) {
      scale_bytes += t.bytes;
    }
  }
  EXPECT_EQ(nibble_bytes * 2, static_cast<uint64_t>(nvfp4_params));  // 4 bits a parameter
  EXPECT_EQ(scale_bytes * 16, static_cast<uint64_t>(nvfp4_params));  // 8 bits per 16
  // inspect's checkpoint row: the file's bytes under the format's name.
  auto counts = count_params(*nvfp4, *manifest);
  ASSERT_TRUE(counts.is_ok());
  uint64_t file_bytes = 0;
  for (const auto& name : ckpt->tensor_names()) file_bytes += ckpt->tensor(name)->data.size();
  EXPECT_EQ(counts->stored_bytes, file_bytes);
  const auto rows = weight_memory_table(*nvfp4, *counts);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.back().bytes, file_bytes);
  EXPECT_NE(rows.back().format.find("NVFP4"), std::string::npos) << rows.back().format;

  // Each backend configuration against itself on the dequantized model: what differs is the weight format
  // alone (the cpu backend's own float paths differ from the reference backend's by more than this).
  std::vector<std::pair<std::string, std::optional<SimdLevel>>> configs = {{"reference", std::nullopt}};
  for (SimdLevel level : available_simd_levels()) configs.emplace_back("cpu", level);
  for (const auto& [backend, level] : configs) {
    const std::string name = backend + (level ? std::string(" ") + simd_level_name(*level) : "");
    const auto want = logits_of(plain.path, backend, level);
    const auto got = logits_of(quantized.path, backend, level);
    ASSERT_FALSE(want.empty()) << tag << " " << name;
    ASSERT_EQ(got.size(), want.size()) << tag << " " << name;
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err2 += std::pow(static_cast<double>(got[i]) - want[i], 2);
      ref2 += static_cast<double>(want[i]) * want[i];
    }
    EXPECT_LT(err2 / ref2, 1e-10) << tag << " " << name;  // float rounding, not a quantization step
  }

  // verify --values: a NaN group scale (0x7f) is reported on the tensor that holds it.
  const std::string target = nvfp4_tensor_names(layout, "model.layers.1.self_attn.o_proj").scales;
  {
    std::fstream f(quantized.path / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_bytes = 0;
    f.read(reinterpret_cast<char*>(&header_bytes), 8);
    std::string header(header_bytes, '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_bytes));
    const auto j = nlohmann::json::parse(header);
    ASSERT_TRUE(j.contains(target)) << target;
    const auto begin = j[target]["data_offsets"][0].get<uint64_t>();
    const char nan = 0x7f;
    f.seekp(static_cast<std::streamoff>(8 + header_bytes + begin));
    f.write(&nan, 1);
  }
  VerifyOptions values;
  values.check_values = true;
  auto scanned = verify_checkpoint(quantized.path.string(), values);
  ASSERT_TRUE(scanned.is_ok()) << scanned.status().to_string();
  bool found = false;
  for (const Finding& finding : scanned->findings)
    found = found || (finding.kind == "non_finite_values" && finding.tensor == target);
  EXPECT_TRUE(found) << format_verify_report(*scanned, 5);
}

TEST(Nvfp4Checkpoint, ModelOptLayoutGivesTheDequantizedModelsLogits) {
  TempFolder dir("day0-nvfp4-base-modelopt");
  const Base base{synth_base(dir.path), dir.path};
  ASSERT_GT(base.spec.n_layers, 1);
  // Layer 0's MLP excluded by a glob, as releases keep sensitive layers in BF16.
  const nlohmann::json q = {{"quant_method", "modelopt"},
                            {"quant_algo", "NVFP4"},
                            {"group_size", 16},
                            {"exclude_modules", {"lm_head", "model.layers.0.mlp*"}},
                            {"kv_cache_quant_algo", nullptr}};
  expect_nvfp4_end_to_end(base, q, Nvfp4Layout::kModelOpt);
}

TEST(Nvfp4Checkpoint, CompressedTensorsLayoutGivesTheDequantizedModelsLogits) {
  TempFolder dir("day0-nvfp4-base-ct");
  const Base base{synth_base(dir.path), dir.path};
  ASSERT_GT(base.spec.n_layers, 1);
  ModelSpec spec = base.spec;
  spec.weights.nvfp4.layout = Nvfp4Layout::kCompressedTensors;
  spec.weights.nvfp4.targets = {"Linear"};
  spec.weights.nvfp4.ignore = {"lm_head", "re:.*layers\\.0\\.self_attn\\.k_proj"};
  spec.weights.nvfp4.activation_scales = true;  // the W4A4 preset: input_global_scale beside each
  expect_nvfp4_end_to_end(base, nvfp4_quantization_config(spec.weights.nvfp4),
                          Nvfp4Layout::kCompressedTensors);
}

}  // namespace
}  // namespace day0
