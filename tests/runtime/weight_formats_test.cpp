// DeepSeek-V4-style weight formats end to end on a miniature written in the format: FP8 e4m3 in 32x32
// blocks with E8M0 scale bytes (V4.1), and routed experts in FP4 e2m1 with E8M0 scales per 32 columns
// (V4's expert_dtype "fp4"). The manifest names the dtypes and bytes the writer produced (verify passes,
// inspect's bytes are the file's), the values dequantise close to the draw they quantised, and the
// model runs with the same logits on the reference backend and on the cpu backend at every SIMD level.
#include <gtest/gtest.h>

#include <cmath>
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
#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_loader.h"
#include "day0/synth/synth_checkpoint.h"
#include "day0/synth/weight_init.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

struct TempFolder {
  fs::path path;
  explicit TempFolder(const std::string& name)
      : path(fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~TempFolder() { fs::remove_all(path); }
};

ModelSpec deepseek_v4_style(bool fp4_experts) {
  ModelSpec full = catalog_model("deepseek-v3").value();
  full.weights.block_rows = 32;
  full.weights.block_cols = 32;
  full.weights.ue8m0_scales = true;
  full.weights.fp4_expert_group = fp4_experts ? 32 : 0;
  return full;
}

// Logits of a short prompt on one backend configuration.
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

void expect_format_end_to_end(bool fp4_experts) {
  const ModelSpec full = deepseek_v4_style(fp4_experts);
  TempFolder dir(fp4_experts ? "day0-v4-fp4" : "day0-v41-fp8");
  SynthOptions options;
  options.seed = 3;
  options.n_shards = 2;
  options.mtp_layers = false;
  auto written = synthesize_miniature(full, {}, options, dir.path.string());
  ASSERT_TRUE(written.is_ok()) << written.status().to_string();
  // The written config reads back as the format.
  auto reparsed = load_model_config((dir.path / "config.json").string());
  ASSERT_TRUE(reparsed.is_ok()) << reparsed.status().to_string();
  EXPECT_EQ(reparsed->weights.fp8_scale_dtype(), DType::kF8E8M0);
  EXPECT_EQ(reparsed->weights.fp4_expert_group, fp4_experts ? 32 : 0);

  auto manifest = build_tensor_manifest(written->spec);
  ASSERT_TRUE(manifest.is_ok());
  VerifyOptions verify;
  verify.manifest = &*manifest;
  auto report = verify_checkpoint(dir.path.string(), verify);
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_EQ(report->n_failed(), 0) << format_verify_report(*report, 5);

  // Every tensor's bytes in the manifest are the file's; scales are bytes, FP4 weights half a byte a value.
  auto ckpt = Checkpoint::open(dir.path.string());
  ASSERT_TRUE(ckpt.is_ok());
  int fp8 = 0, fp4 = 0;
  for (const TensorSpec& t : manifest->tensors) {
    if (t.mtp) continue;  // not written (mtp_layers = false)
    const auto view = ckpt->tensor(t.name);
    ASSERT_TRUE(view.is_ok()) << t.name;
    EXPECT_EQ(t.bytes, view->data.size()) << t.name;
    if (t.dtype == DType::kF8E4M3) {
      const TensorView scale = *ckpt->tensor(t.name + "_scale_inv");
      EXPECT_EQ(scale.dtype, DType::kF8E8M0) << t.name;
      EXPECT_EQ(std::vector<int64_t>(scale.shape.begin(), scale.shape.end()),
                (std::vector<int64_t>{(t.shape[0] + 31) / 32, (t.shape[1] + 31) / 32}));
      auto values = dequant_fp8_block(*view, scale, 32, 32);
      ASSERT_TRUE(values.is_ok()) << values.status().to_string();
      const auto ref = normal_values(3, t.name, values->size(), 0.02f);
      for (size_t i = 0; i < values->size(); ++i)
        ASSERT_NEAR((*values)[i], ref[i], std::fabs(ref[i]) / 15.0f + 1e-4f) << t.name << " " << i;
      ++fp8;
    } else if (t.storage == WeightStorage::kFp4Packed) {
      EXPECT_EQ(t.role, TensorRole::kRoutedExpert) << t.name;
      EXPECT_EQ(t.params * 1, static_cast<int64_t>(2 * view->data.size())) << t.name;
      auto values = dequant_fp4(*view, *ckpt->tensor(t.name + "_scale_inv"));
      ASSERT_TRUE(values.is_ok()) << values.status().to_string();
      const auto ref = normal_values(3, t.name, values->size(), 0.02f);
      double err2 = 0, ref2 = 0;
      for (size_t i = 0; i < values->size(); ++i) {
        err2 += std::pow((*values)[i] - ref[i], 2);
        ref2 += std::pow(ref[i], 2);
      }
      EXPECT_LT(err2 / ref2, 0.02) << t.name;  // e2m1 with a power-of-two scale: ~1% of the energy
      ++fp4;
    }
  }
  EXPECT_GT(fp8, 4);
  EXPECT_EQ(fp4 > 0, fp4_experts);

  const auto want = logits_of(dir.path, "reference", std::nullopt);
  ASSERT_FALSE(want.empty());
  double ref2 = 0;
  for (float v : want) ref2 += static_cast<double>(v) * v;
  for (SimdLevel level : available_simd_levels()) {
    const auto got = logits_of(dir.path, "cpu", level);
    ASSERT_EQ(got.size(), want.size()) << simd_level_name(level);
    double err2 = 0;
    for (size_t i = 0; i < got.size(); ++i) err2 += std::pow(static_cast<double>(got[i]) - want[i], 2);
    EXPECT_LT(err2 / ref2, 1e-8) << simd_level_name(level);
  }
}

TEST(WeightFormats, Fp8In32x32BlocksWithE8m0ScaleBytes) {
  expect_format_end_to_end(false);
}

TEST(WeightFormats, Fp4RoutedExpertsWithE8m0ScalesPer32) {
  expect_format_end_to_end(true);
}

// verify --values reads E8M0 scale bytes: a 0xFF (NaN) scale is reported on the tensor that holds it.
TEST(WeightFormats, VerifyValuesFindsANanScaleByte) {
  TempFolder dir("day0-v41-nan-scale");
  SynthOptions options;
  options.n_shards = 1;
  options.mtp_layers = false;
  auto written = synthesize_miniature(deepseek_v4_style(true), {}, options, dir.path.string());
  ASSERT_TRUE(written.is_ok()) << written.status().to_string();
  const std::string target = "model.layers.0.self_attn.o_proj.weight_scale_inv";
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    if (entry.path().extension() != ".safetensors") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_bytes = 0;
    f.read(reinterpret_cast<char*>(&header_bytes), 8);
    std::string header(header_bytes, '\0');
    f.read(header.data(), static_cast<std::streamsize>(header_bytes));
    const auto j = nlohmann::json::parse(header);
    ASSERT_TRUE(j.contains(target));
    ASSERT_EQ(j[target]["dtype"], "F8_E8M0");
    const auto begin = j[target]["data_offsets"][0].get<uint64_t>();
    const char nan = static_cast<char>(0xff);
    f.seekp(static_cast<std::streamoff>(8 + header_bytes + begin));
    f.write(&nan, 1);
  }
  VerifyOptions verify;
  verify.check_values = true;
  auto report = verify_checkpoint(dir.path.string(), verify);
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  bool found = false;
  for (const Finding& finding : report->findings)
    found = found || (finding.kind == "non_finite_values" && finding.tensor == target);
  EXPECT_TRUE(found) << format_verify_report(*report, 5);
}

// inspect's byte count for 32x32 E8M0 blocks: one byte a block beside the weight's byte a value; the
// 128x128 ue8m0 releases (DeepSeek-V3.1 / V3.2) keep float32 scales.
TEST(WeightFormats, ScaleBytesFollowTheBlockAndTheScaleFormat) {
  for (bool small_blocks : {true, false}) {
    ModelSpec spec = deepseek_v4_style(false);
    if (!small_blocks) spec.weights.block_rows = spec.weights.block_cols = 128;
    auto manifest = build_tensor_manifest(spec);
    ASSERT_TRUE(manifest.is_ok());
    int checked = 0;
    for (const TensorSpec& t : manifest->tensors) {
      if (!t.name.ends_with("_scale_inv")) continue;
      const int64_t blocks = t.shape[0] * t.shape[1];
      EXPECT_EQ(t.dtype, small_blocks ? DType::kF8E8M0 : DType::kF32) << t.name;
      EXPECT_EQ(t.bytes, static_cast<uint64_t>(blocks) * (small_blocks ? 1u : 4u)) << t.name;
      EXPECT_EQ(t.params, 0) << t.name;
      EXPECT_TRUE(t.accepts(DType::kU8) && t.accepts(DType::kF32) && t.accepts(DType::kF8E8M0)) << t.name;
      ++checked;
    }
    EXPECT_GT(checked, 10);
  }
}

}  // namespace
}  // namespace day0
