// Stage 3: the weights are complete — every manifest tensor with its shape and dtype, no shard
// missing or truncated, hashes verified when a hash list is available, and no NaN / Inf / absurd value
// in any float tensor (what `verify --values` checks).
#include <fmt/format.h>

#include <filesystem>

#include "day0/core/human.h"
#include "day0/io/checkpoint_verify.h"
#include "day0/model/tensor_manifest.h"
#include "day0/report/adapt_context.h"

namespace day0::report {

namespace {
bool folder_has_shards(const std::filesystem::path& folder) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (entry.path().extension() == ".safetensors") return true;
  }
  return false;
}
}  // namespace

void run_weights_stage(AdaptContext& ctx, StageResult& out) {
  if (!ctx.model) return stage_skip(out, "the structure stage did not resolve the model");
  if (ctx.model->from_catalog || ctx.model->folder.empty()) {
    ctx.real_weights = false;
    return stage_skip(out, "MODEL is a catalog entry (a config alone): there are no weights to verify");
  }
  if (!folder_has_shards(ctx.model->folder)) {
    ctx.real_weights = false;
    return stage_skip(out, "no *.safetensors shards beside " + ctx.model->source + ": a config alone");
  }
  auto manifest = build_tensor_manifest(ctx.model->spec);
  if (!manifest.is_ok()) return stage_fail(out, manifest.status().to_string());
  VerifyOptions options;
  options.manifest = &*manifest;
  // MTP layers are in the manifest: verified like the rest, never "extra".
  options.check_values = true;  // NaN / Inf / absurd magnitudes, from the bytes the hash reads anyway
  auto verified = verify_checkpoint(ctx.model->folder.string(), options);
  if (!verified.is_ok()) return stage_fail(out, verified.status().to_string());
  const VerifyReport& report = *verified;

  int64_t hashed = 0, hash_ok = 0;
  for (const auto& shard : report.shards) {
    if (!shard.expected_sha256.empty()) ++hashed;
    if (shard.hash_status == "ok") ++hash_ok;
  }
  nlohmann::json failed = nlohmann::json::array();
  for (const auto& f : report.findings) {
    if (f.failed && failed.size() < 20) {
      failed.push_back({{"kind", f.kind},
                        {"shard", f.shard},
                        {"tensor", f.tensor},
                        {"expected", f.expected},
                        {"found", f.found},
                        {"message", f.message}});
    }
  }
  out.evidence = {{"shards", report.shards.size()},
                  {"tensors", report.n_tensors},
                  {"manifest_tensors", report.n_manifest_tensors},
                  {"bytes_hashed", report.bytes_hashed},
                  {"hashes_checked", hashed},
                  {"hashes_ok", hash_ok},
                  {"hash_source", report.hash_source},
                  {"tensors_value_checked", report.n_values_checked},
                  {"failed_findings", report.n_failed()},
                  {"findings", failed}};
  ctx.real_weights = true;
  if (!report.ok()) {
    const Finding* first = nullptr;
    for (const auto& f : report.findings) {
      if (f.failed) {
        first = &f;
        break;
      }
    }
    std::string where = first->shard.empty() ? "" : "shard " + first->shard + ": ";
    if (!first->tensor.empty()) where += "tensor " + first->tensor + ": ";
    return stage_fail(out,
                      fmt::format("{} problem(s); first: {}{}", report.n_failed(), where, first->message));
  }
  stage_pass(out,
             fmt::format("{} shards, {} tensors complete; {}", report.shards.size(), report.n_tensors,
                         hashed > 0 ? fmt::format("{}/{} shard hashes match ({})", hash_ok, hashed,
                                                  human_bytes(static_cast<double>(report.bytes_hashed)))
                                    : std::string("no hash list beside the shards: hashes not checked")));
}

}  // namespace day0::report
