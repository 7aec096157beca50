// `verify` takes each tensor's expected dtype from the family's weight table: a BF16 checkpoint whose
// routers, correction biases and norms are float32 (how transformers saves DeepSeek-V2/V3 and
// GLM-4.5) passes, while a projection in the wrong dtype still fails.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "day0/io/checkpoint_verify.h"
#include "day0/io/safetensors_writer.h"
#include "day0/model/config_parser.h"
#include "io_fixtures.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

// Writes every manifest tensor with the dtype `pick` chooses (zero bytes) and verifies it.
VerifyReport write_and_verify(const TensorManifest& manifest,
                              const std::function<DType(const TensorSpec&)>& pick) {
  testing::TempDir dir;
  CheckpointWriter w(/*max_shard_bytes=*/1 << 20);
  for (const auto& t : manifest.tensors) {
    const DType dtype = pick(t);
    std::vector<uint8_t> data(*tensor_byte_size(dtype, t.shape));
    EXPECT_TRUE(w.add(tensor_bytes(t.name, dtype, t.shape, std::move(data))).is_ok());
  }
  EXPECT_TRUE(w.write(dir.path()).is_ok());
  VerifyOptions options;
  options.manifest = &manifest;
  options.check_hashes = false;
  auto report = verify_checkpoint(dir.path(), options);
  EXPECT_TRUE(report.is_ok()) << report.status().to_string();
  return report.is_ok() ? *report : VerifyReport{};
}

TEST(VerifyWeightTable, Fp32RoutersAndNormsInsideABf16CheckpointPass) {
  auto spec = load_model_config(fs::path(DAY0_TEST_DATA_DIR) / "golden" / "glm-4.5" / "config.json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  ASSERT_TRUE(spec->moe && spec->moe->correction_bias);
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok());
  int64_t kept_f32 = 0;
  const VerifyReport ok = write_and_verify(*manifest, [&](const TensorSpec& t) {
    const bool f32 = t.role == TensorRole::kRouter || t.role == TensorRole::kNorm;
    kept_f32 += f32;
    return f32 ? DType::kF32 : DType::kBF16;
  });
  EXPECT_GT(kept_f32, 4);
  EXPECT_TRUE(ok.ok()) << format_verify_report(ok);

  // The table is not a blanket "anything goes": an F32 attention projection is still wrong.
  const VerifyReport bad = write_and_verify(*manifest, [](const TensorSpec& t) {
    return t.name.ends_with("layers.0.self_attn.q_proj.weight") ? DType::kF32 : t.dtype;
  });
  EXPECT_EQ(bad.n_failed(), 1) << format_verify_report(bad);
  ASSERT_FALSE(bad.findings.empty());
  EXPECT_EQ(bad.findings.front().kind, "dtype_mismatch");
}

TEST(VerifyWeightTable, DeclaredMtpLayersAreExpectedNotExtra) {
  auto spec = load_model_config(fs::path(DAY0_TEST_DATA_DIR) / "golden" / "deepseek-v3" / "config.json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  spec->n_mtp_layers = 1;  // as every DeepSeek-V3 / R1 / Kimi K2 release declares
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok());
  // All tensors present, MTP layer included: clean.
  const VerifyReport all = write_and_verify(*manifest, [](const TensorSpec& t) { return t.dtype; });
  EXPECT_TRUE(all.ok()) << format_verify_report(all, 5);
  // A release without its MTP layers is reported, not failed: decoding never reads them.
  TensorManifest main_only = *manifest;
  std::erase_if(main_only.tensors, [](const TensorSpec& t) { return t.mtp; });
  testing::TempDir dir;
  CheckpointWriter w(1 << 20);
  for (const auto& t : main_only.tensors) {
    std::vector<uint8_t> data(*tensor_byte_size(t.dtype, t.shape));
    ASSERT_TRUE(w.add(tensor_bytes(t.name, t.dtype, t.shape, std::move(data))).is_ok());
  }
  ASSERT_TRUE(w.write(dir.path()).is_ok());
  VerifyOptions options;
  options.manifest = &*manifest;
  options.check_hashes = false;
  auto report = verify_checkpoint(dir.path(), options);
  ASSERT_TRUE(report.is_ok());
  EXPECT_TRUE(report->ok()) << format_verify_report(*report, 5);
  const auto missing = std::count_if(report->findings.begin(), report->findings.end(),
                                     [](const Finding& f) { return f.kind == "missing_mtp_tensor"; });
  EXPECT_EQ(missing, static_cast<int64_t>(manifest->tensors.size() - main_only.tensors.size()));
}

}  // namespace
}  // namespace day0
