// day0 adapt: the whole Day-0 checklist, with a report a person reads and a CI pipeline gates on.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "command.h"
#include "day0/audit/audit.h"
#include "day0/core/human.h"
#include "day0/report/adapt.h"
#include "day0/report/render.h"

namespace day0::cli {
namespace {

struct AdaptCliOptions {
  report::AdaptOptions adapt;
  double soak_max_growth_mib = 32.0;
  std::string kv_dtype = "bf16";
  bool json = false;
  std::string api_key_env;
  std::string target_concurrency = "1,4,16,64";
  std::string target_soak;
};

const char* mark(report::Verdict v) {
  switch (v) {
    case report::Verdict::kPass:
      return "PASS";
    case report::Verdict::kFail:
      return "FAIL";
    case report::Verdict::kSkipped:
      return "SKIP";
  }
  return "SKIP";
}

int run_adapt_command(AdaptCliOptions& options) {
  options.adapt.soak_max_growth_bytes = static_cast<uint64_t>(options.soak_max_growth_mib * 1024 * 1024);
  options.adapt.kv_dtype = parse_kv_dtype(options.kv_dtype).value_or(KvDtype::kBF16);
  const bool tty = isatty(STDERR_FILENO) != 0;
  int index = 0;
  if (!options.adapt.target.empty()) {
    auto levels = audit::parse_concurrency(options.target_concurrency);
    if (!levels.is_ok()) return report_error("adapt", levels.status());
    options.adapt.target_concurrency = *levels;
    if (!options.target_soak.empty()) {
      auto seconds = audit::parse_duration(options.target_soak);
      if (!seconds.is_ok()) return report_error("adapt", seconds.status());
      options.adapt.target_soak_seconds = *seconds;
    }
    if (!options.api_key_env.empty()) {
      const char* key = std::getenv(options.api_key_env.c_str());
      if (key == nullptr || *key == '\0')
        return report_error(
            "adapt", invalid_argument("--api-key-env " + options.api_key_env + ": the variable is not set"));
      options.adapt.target_api_key = key;
    }
  }
  const size_t n_stages = report::adapt_stages_for(options.adapt).size();
  auto on_stage = [&](const report::StageResult& stage) {
    ++index;
    std::string line = fmt::format("[{}/{}] {:<28} {}  {:>9}  {}", index, n_stages, stage.title,
                                   mark(stage.verdict), human_seconds(stage.seconds), stage.summary);
    if (!stage.reason.empty()) line += (stage.summary.empty() ? "" : " — ") + stage.reason;
    for (const auto& w : stage.warnings)
      line += fmt::format("\n      WARNING {}: {}{}", w.id, w.message,
                          options.adapt.strict ? " (fails under --strict)" : "");
    if (tty) {
      const char* color = stage.verdict == report::Verdict::kPass   ? "\033[32m"
                          : stage.verdict == report::Verdict::kFail ? "\033[31m"
                                                                    : "\033[33m";
      line = fmt::format("{}{}\033[0m", color, line);
    }
    fmt::print(stderr, "{}\n", line);
  };
  // --out is checked (and locked) before the first stage: a bad --out costs nothing.
  auto out_lock = report::prepare_report_dir(options.adapt.out_dir);
  if (!out_lock.is_ok()) return report_error("adapt", out_lock.status());
  fmt::print(stderr, "day0 adapt {}: {} stages, backend {}, report in {}/\n", options.adapt.model, n_stages,
             options.adapt.backend, options.adapt.out_dir);
  auto result = report::run_adapt(options.adapt, on_stage);
  if (!result.is_ok()) return report_error("adapt", result.status());
  const report::Report& rep = *result;
  if (Status st = report::write_report_files(rep, options.adapt.out_dir); !st.is_ok()) {
    return report_error("adapt", st);
  }
  for (const auto& r : rep.regressions) {
    fmt::print(stderr, "regression: {} {}: {} -> {} ({})\n", r.stage, r.metric, r.old_value, r.new_value,
               r.why);
  }
  if (options.json) {
    fmt::print("{}\n", report::to_json(rep).dump(2));
  } else {
    std::string verdict = "verdict: " + report::verdict_text(rep, true);
    if (isatty(STDOUT_FILENO) != 0) {
      // Green only for a pass that skipped no required stage.
      const char* color = rep.verdict == report::Verdict::kFail ? "\033[31m"
                          : rep.skipped_required.empty()        ? "\033[32m"
                                                                : "\033[33m";
      verdict = fmt::format("{}{}\033[0m", color, verdict);
    }
    fmt::print("{}\nreport: {}/report.html ({}/report.json, {}/report.md)\n", verdict, options.adapt.out_dir,
               options.adapt.out_dir, options.adapt.out_dir);
  }
  return rep.verdict == report::Verdict::kPass ? kExitOk : kExitCheckFailed;
}

const Registrar kAdapt(
    "adapt",
    "Run the whole Day-0 checklist on MODEL (default: the built-in DeepSeek-V3) and write "
    "out/report.{json,md,html}",
    5, [](CLI::App& app) -> CommandRunner {
      auto o = std::make_shared<AdaptCliOptions>();
      app.add_option(
          "model", o->adapt.model,
          "Model folder, config.json, or catalog name (default: deepseek-v3, the embedded default)");
      app.add_option("--reference", o->adapt.reference_dump,
                     "Reference dump (day0-reference/1) of the real model for the alignment stage")
          ->check(CLI::ExistingFile);
      app.add_option("--reference-python", o->adapt.reference_python,
                     "Python with torch + transformers: the miniature stage also aligns the miniature "
                     "against Hugging Face transformers (tools/reference/dump_reference.py). Default: "
                     "found by itself (DAY0_REFERENCE_PYTHON, /opt/refvenv/bin/python, python3), skipped "
                     "with the reason if none imports transformers; 'none' turns it off")
          ->default_str("auto");
      app.add_option("--spot-reference", o->adapt.spot_reference,
                     "Generation spot checks: greedy continuations of the reference (day0-spot-reference/1, "
                     "from tools/reference/dump_reference.py spot)")
          ->check(CLI::ExistingFile);
      app.add_option("--spot-base", o->adapt.spot_base,
                     "Generation spot checks of a quantized MODEL: its unquantized base (folder or .gguf)");
      app.add_option("--spot-min-agreement", o->adapt.spot_min_agreement,
                     "Generation spot checks: the least mean share of greedy tokens before the first "
                     "divergence from the reference or base")
          ->capture_default_str()
          ->check(finite_number(0.0, 1.0, "--spot-min-agreement (a share)"));
      app.add_option("--cluster", o->adapt.cluster, "Cluster preset (e.g. 8xH200) or file for the plan stage")
          ->default_str("this machine");
      app.add_option("--backend", o->adapt.backend, "Backend: cpu, reference, partial")
          ->capture_default_str();
      app.add_option("--kv-dtype", o->kv_dtype,
                     "KV cache element type of the run target (performance, stability): bf16, f32, fp8")
          ->check(CLI::IsMember({"bf16", "f32", "fp8"}))
          ->capture_default_str();
      app.add_option("--out", o->adapt.out_dir, "Output folder for the report")->capture_default_str();
      app.add_option("--compare", o->adapt.compare_path,
                     "Previous report.json: regressions against it fail the run")
          ->check(CLI::ExistingFile);
      app.add_option(
             "--optional", o->adapt.optional_stages,
             "Stages whose failure does not fail the run (ids: structure coverage weights miniature "
             "alignment generation plan distributed performance stability, and with --target "
             "target-tokens target-logprobs target-generation target-tools target-limits target-speed)")
          ->delimiter(',');
      app.add_flag("--require-all", o->adapt.require_all,
                   "A required stage that is skipped fails the run (exit 1), as a failing one does (default: "
                   "the run passes, its verdict naming the skipped stages); --optional stages may skip");
      app.add_flag("--strict-ops", o->adapt.strict_ops, "Any operator fallback fails the coverage stage");
      app.add_flag("--strict-config", o->adapt.strict_config,
                   "A config key Day0 does not account for fails the structure stage");
      app.add_option("--seed", o->adapt.seed, "Seed of the miniature's random weights")
          ->capture_default_str();
      // The runs use the miniature, whose context is small: both lengths stay within kMaxAdaptRunTokens.
      app.add_option("--prompt-tokens", o->adapt.prompt_tokens, "Prompt length of the runs")
          ->capture_default_str()
          ->check(CLI::Range(1, report::kMaxAdaptRunTokens));
      app.add_option("--new-tokens", o->adapt.new_tokens, "Tokens generated per run")
          ->capture_default_str()
          ->check(CLI::Range(1, report::kMaxAdaptRunTokens));
      app.add_option("--soak-requests", o->adapt.soak_requests, "Requests of the stability soak")
          ->capture_default_str()
          ->check(CLI::Range(1, 100'000'000));
      app.add_option("--soak-seconds", o->adapt.soak_seconds, "Time bound of the stability soak")
          ->capture_default_str()
          ->check(finite_number(0.0, 86400.0, "--soak-seconds (the soak's time bound)", true));
      app.add_option("--soak-max-growth", o->soak_max_growth_mib,
                     "Stability soak: allowed resident-memory growth after warm-up, MiB")
          ->capture_default_str()
          ->check(finite_number(0.0, 1 << 20, "--soak-max-growth (MiB)"));
      app.add_option("--margin-align", o->adapt.margins.alignment,
                     "--compare: allowed relative worsening of alignment errors")
          ->capture_default_str()
          ->check(finite_number(0.0, 1e6, "--margin-align (a relative margin)"));
      app.add_option("--margin-throughput", o->adapt.margins.throughput,
                     "--compare: allowed relative fall of tokens/s")
          ->capture_default_str()
          ->check(finite_number(0.0, 1.0, "--margin-throughput (a relative fall)"));
      app.add_option("--target", o->adapt.target,
                     "An OpenAI-compatible server serving MODEL (e.g. http://127.0.0.1:8000): the checklist "
                     "adds day0 audit's stages against it (target-tokens ... target-speed)");
      app.add_option("--served-model-name", o->adapt.served_model_name,
                     "--target: the model name requests carry (default: the first of its /v1/models)");
      app.add_option("--api-key-env", o->api_key_env, "--target: environment variable holding its API key");
      app.add_option("--target-concurrency", o->target_concurrency, "--target: load levels of target-speed")
          ->capture_default_str();
      app.add_option("--target-soak", o->target_soak, "--target: soak it this long (90s, 15m, 2h)");
      app.add_option("--target-format", o->adapt.target_format,
                     "--target: its weight format for the logprob bounds (auto, f32, bf16, f16, fp8, mxfp4, "
                     "int8, int4; as day0 audit)")
          ->default_str("auto");
      app.add_option("--quantized-reference", o->adapt.quantized_reference,
                     "--target: Day0's own quantized copy of a float MODEL the target serves quantized");
      app.add_flag("--strict", o->adapt.strict,
                   "Warnings (a bad request refused with a 5xx rather than a 4xx) fail their stage");
      app.add_flag("--json", o->json, "Print report.json on stdout");
      return [o] { return run_adapt_command(*o); };
    });

}  // namespace
}  // namespace day0::cli
