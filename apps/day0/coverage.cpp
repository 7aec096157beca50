// day0 coverage MODEL --backend cpu|reference|partial: where every operator of the model would run
// (native / decomposed / host fallback / missing) before anything runs; --matrix prints the whole
// op x backend x weight-format support table from the registry.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "command.h"
#include "day0/graph/coverage.h"
#include "day0/model/catalog.h"
#include "day0/runtime/op_recording.h"

namespace day0::cli {
namespace {

struct CoverageOptions {
  std::string model;
  std::string backend = "cpu";
  bool json = false;
  bool strict_ops = false;
  bool strict_config = false;
  bool matrix = false;
  int64_t context = kDefaultOpContext;
};

int run_coverage(const CoverageOptions& o) {
  if (o.matrix) {
    if (o.json) {
      fmt::print("{}\n", support_matrix_json().dump(2));
    } else {
      fmt::print("{}", support_matrix_text());
    }
    return kExitOk;
  }
  if (o.model.empty())
    return report_error("coverage", invalid_argument("MODEL is required (or use --matrix)"));
  auto resolved = resolve_model(o.model, o.strict_config);
  if (!resolved) return report_error("coverage", resolved.status());
  // No operator list to place for a model the engine does not run yet: its missing blocks are the report.
  if (const auto missing = unimplemented_mechanisms(resolved->spec); !missing.empty()) {
    if (o.json) {
      nlohmann::json out = {{"model", o.model},
                            {"backend", o.backend},
                            {"ok", false},
                            {"unimplemented_mechanisms", missing},
                            {"unknown_config_keys", resolved->config_audit.unknown_keys}};
      fmt::print("{}\n", out.dump(2));
    } else {
      fmt::print("{}: no operator list: the engine has no block for:\n", o.model);
      for (const std::string& m : missing) fmt::print("  missing  {}\n", m);
      fmt::print("{}", unknown_keys_text(resolved->config_audit));
    }
    return kExitCheckFailed;
  }
  auto list = record_op_list(resolved->spec, o.context);
  if (!list) return report_error("coverage", list.status().with_context(o.model));
  BackendOptions options;
  options.strict_ops = o.strict_ops;
  options.n_threads = 1;
  auto report = compute_coverage(o.model, *list, o.backend, options);
  if (!report) return report_error("coverage", report.status());
  if (o.json) {
    auto out = coverage_json(*report);
    out["unknown_config_keys"] = resolved->config_audit.unknown_keys;
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("{}{}", coverage_text(*report), unknown_keys_text(resolved->config_audit));
  }
  return report->failed() ? kExitCheckFailed : kExitOk;
}

const Registrar kCoverageCommand{
    "coverage",
    "Where each operator of MODEL runs on a backend: native, decomposed, host fallback or missing", 40,
    [](CLI::App& app) -> CommandRunner {
      auto o = std::make_shared<CoverageOptions>();
      app.add_option("MODEL", o->model, "checkpoint folder, config.json, or catalog name (e.g. deepseek-v3)");
      app.add_option("--backend", o->backend, "backend: reference, cpu or partial (cpu with kernels hidden)")
          ->check(CLI::IsMember({"reference", "cpu", "partial"}));
      app.add_flag("--json", o->json, "print JSON instead of tables");
      app.add_flag("--strict-ops", o->strict_ops, "treat host fallback as an error (exit 1)");
      app.add_flag("--strict-config", o->strict_config,
                   "fail (exit 2) on a config key Day0 does not account for");
      app.add_flag("--matrix", o->matrix, "print the op x backend x weight-format support matrix");
      app.add_option("--context", o->context, "cached tokens for the per-token FLOPs/bytes shares")
          ->check(CLI::PositiveNumber);
      return [o] { return run_coverage(*o); };
    }};

}  // namespace
}  // namespace day0::cli
