// day0 verify MODEL: is this download complete and intact? Structure against the model's tensor
// manifest (from config.json) and SHA-256 of every shard against the published hashes.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "command.h"
#include "day0/io/checkpoint.h"
#include "day0/io/checkpoint_verify.h"
#include "day0/model/catalog.h"
#include "day0/model/tensor_manifest.h"

namespace day0::cli {
namespace {

struct VerifyArgs {
  std::string model;
  std::string config;
  std::string hashes;
  bool allow_extra = false;
  bool no_hash = false;
  bool write_hashes = false;
  bool values = false;
  bool json = false;
  int threads = 0;
  size_t max_listed = 40;
};

int run_verify(const VerifyArgs& args) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // The model's structure: --config (file, folder or catalog name), else config.json beside the shards.
  std::string config_arg = args.config;
  const fs::path model_path(args.model);
  const fs::path dir = fs::is_directory(model_path, ec) ? model_path : model_path.parent_path();
  if (config_arg.empty() && fs::exists(dir / "config.json", ec)) config_arg = (dir / "config.json").string();
  TensorManifest manifest;
  VerifyOptions options;
  std::string structure_source = "none (no config.json: shard headers and index only)";
  if (!config_arg.empty()) {
    auto resolved = resolve_model(config_arg);
    if (!resolved.is_ok()) return report_error("verify", resolved.status());
    auto built = build_tensor_manifest(resolved->spec);
    if (!built.is_ok()) return report_error("verify", built.status());
    manifest = std::move(built).value();
    options.manifest = &manifest;
    structure_source = resolved->source;
  }
  options.allow_extra = args.allow_extra;
  options.check_hashes = !args.no_hash;
  options.hashes_path = args.hashes;
  options.write_hashes = args.write_hashes;
  options.check_values = args.values;
  if (args.values && args.no_hash) {
    return report_error("verify",
                        invalid_argument("--values scans the bytes the hashing pass reads; drop --no-hash"));
  }
  options.threads = args.threads;
  options.progress_out = stderr;
  options.progress_tty = ::isatty(::fileno(stderr)) != 0;
  if (args.write_hashes && args.no_hash) {
    return report_error("verify", invalid_argument("--write-hashes needs hashing; drop --no-hash"));
  }

  auto report = verify_checkpoint(args.model, options);
  if (!report.is_ok()) return report_error("verify", report.status());
  if (args.json) {
    auto out = verify_report_json(*report);
    out["model_config"] = config_arg.empty() ? nlohmann::json(nullptr) : nlohmann::json(structure_source);
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("Model structure from: {}\n", structure_source);
    fmt::print("{}", format_verify_report(*report, args.max_listed));
  }
  return report->ok() ? kExitOk : kExitCheckFailed;
}

const Registrar kVerifyCommand(
    "verify",
    "Check a downloaded checkpoint: every shard present and complete, every tensor of the model with the "
    "right shape and dtype, and SHA-256 of every shard against SHA256SUMS / LFS pointers / a JSON map",
    20, [](CLI::App& app) -> CommandRunner {
      auto args = std::make_shared<VerifyArgs>();
      app.add_option(
             "MODEL", args->model,
             "Checkpoint folder (config.json + shards + model.safetensors.index.json), an index file or "
             "a .safetensors file")
          ->required();
      app.add_option("--config", args->config,
                     "Model whose tensors to expect: config.json path, folder or catalog name (default: "
                     "config.json beside the shards)");
      app.add_flag("--allow-extra", args->allow_extra,
                   "Report tensors the model does not use (e.g. MTP layers) without failing");
      app.add_option("--hashes", args->hashes,
                     "Expected hashes: sha256sum file, JSON map, HF API JSON, or a folder of Git LFS pointer "
                     "files (default: SHA256SUMS beside the shards)");
      app.add_flag("--write-hashes", args->write_hashes,
                   "Write SHA256SUMS beside the shards from the digests");
      app.add_flag("--no-hash", args->no_hash, "Skip SHA-256 (structure only)");
      app.add_flag("--values", args->values,
                   "Also scan every float tensor for NaN, Inf and absurd magnitudes (same read as the hash)");
      app.add_option("--threads", args->threads, "Shards hashed at once (default: all cores)")
          ->check(CLI::Range(1, 1024));
      app.add_option("--max-listed", args->max_listed, "Findings of one kind listed before summarising")
          ->check(CLI::Range(1, 1000000));
      app.add_flag("--json", args->json, "Print the report as JSON");
      return [args] { return run_verify(*args); };
    });

}  // namespace
}  // namespace day0::cli
