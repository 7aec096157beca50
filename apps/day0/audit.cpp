// day0 audit: an OpenAI-compatible server serving MODEL, checked against Day0's reference.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "command.h"
#include "day0/audit/audit.h"
#include "day0/core/human.h"
#include "day0/report/render.h"

namespace day0::cli {
namespace {

struct AuditCliOptions {
  audit::AuditOptions audit;
  std::string api_key_env;
  std::string concurrency = "1,4,16,64";
  std::string soak;
  std::string out_dir = "out";
  bool json = false;
};

const char* audit_mark(report::Verdict v) {
  return v == report::Verdict::kPass ? "PASS" : v == report::Verdict::kFail ? "FAIL" : "SKIP";
}

int run_audit_command(AuditCliOptions& o) {
  auto levels = audit::parse_concurrency(o.concurrency);
  if (!levels.is_ok()) return report_error("audit", levels.status());
  o.audit.concurrency = *levels;
  if (!o.soak.empty()) {
    auto seconds = audit::parse_duration(o.soak);
    if (!seconds.is_ok()) return report_error("audit", seconds.status());
    o.audit.soak_seconds = *seconds;
  }
  if (!o.api_key_env.empty()) {
    const char* key = std::getenv(o.api_key_env.c_str());
    if (key == nullptr || *key == '\0')
      return report_error("audit",
                          invalid_argument("--api-key-env " + o.api_key_env + ": the variable is not set"));
    o.audit.api_key = key;
  }
  if (o.audit.target_pid > 0 && !std::filesystem::exists(fmt::format("/proc/{}/status", o.audit.target_pid)))
    return report_error("audit", invalid_argument(fmt::format("--target-pid {}: no such process on this host",
                                                              o.audit.target_pid)));
  auto out_lock = report::prepare_report_dir(o.out_dir);
  if (!out_lock.is_ok()) return report_error("audit", out_lock.status());
  const size_t n = audit::audit_stages().size();
  fmt::print(stderr, "day0 audit {} against {}: {} stages, report in {}/\n", o.audit.model, o.audit.target, n,
             o.out_dir);
  int index = 0;
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto on_stage = [&](const report::StageResult& stage) {
    std::string line = fmt::format("[{}/{}] {:<28} {}  {:>9}  {}", ++index, n, stage.title,
                                   audit_mark(stage.verdict), human_seconds(stage.seconds), stage.summary);
    if (!stage.reason.empty()) line += (stage.summary.empty() ? "" : " — ") + stage.reason;
    // Under --strict the runner fails a stage with warnings after it ends: the line says so now.
    for (const auto& w : stage.warnings)
      line += fmt::format("\n      WARNING {}: {}{}", w.id, w.message,
                          o.audit.strict ? " (fails under --strict)" : "");
    if (tty) {
      const char* color = stage.verdict == report::Verdict::kPass   ? "\033[32m"
                          : stage.verdict == report::Verdict::kFail ? "\033[31m"
                                                                    : "\033[33m";
      line = fmt::format("{}{}\033[0m", color, line);
    }
    fmt::print(stderr, "{}\n", line);
  };
  auto result = audit::run_audit(o.audit, on_stage);
  if (!result.is_ok()) return report_error("audit", result.status());
  if (Status st = report::write_report_files(*result, o.out_dir); !st.is_ok())
    return report_error("audit", st);
  if (o.json) {
    fmt::print("{}\n", report::to_json(*result).dump(2));
  } else {
    fmt::print("verdict: {}\nreport: {}/report.html ({}/report.json, {}/report.md)\n",
               report::verdict_text(*result, true), o.out_dir, o.out_dir, o.out_dir);
  }
  return result->verdict == report::Verdict::kPass ? kExitOk : kExitCheckFailed;
}

const Registrar kAudit(
    "audit",
    "Check an OpenAI-compatible server (vLLM, SGLang, trtllm-serve, llama-server, Ollama, day0 serve) "
    "serving "
    "MODEL against Day0's tokenizer, template and reference forward pass; write out/report.{json,md,html}",
    70, [](CLI::App& app) -> CommandRunner {
      auto o = std::make_shared<AuditCliOptions>();
      app.add_option("model", o->audit.model, "The checkpoint the target serves: folder or .gguf")
          ->required();
      app.add_option("--target", o->audit.target, "The server's base URL, e.g. http://127.0.0.1:8000")
          ->required();
      app.add_option("--served-model-name", o->audit.served_model_name,
                     "The model name requests carry (default: the first of the target's /v1/models)");
      app.add_option("--api-key-env", o->api_key_env, "Environment variable holding the target's API key");
      app.add_option("--tokenizer", o->audit.tokenizer,
                     "Folder or .gguf with the tokenizer and chat template, when MODEL has none");
      app.add_option("--concurrency", o->concurrency, "Load levels of the speed stage")
          ->capture_default_str();
      app.add_option("--soak", o->soak, "Soak the target this long after the load levels (90s, 15m, 2h)");
      app.add_option("--new-tokens", o->audit.new_tokens, "Greedy tokens per completion of the stages")
          ->capture_default_str()
          ->check(CLI::Range(4, 4096));
      app.add_option("--context", o->audit.context,
                     "The context the target enforces (default: what it says, else the model's)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
      app.add_option("--bench-requests", o->audit.bench_requests_per_level,
                     "Requests per load level (default: 2 x concurrency, at least 8)")
          ->check(CLI::Range(1, 1000000));
      app.add_option("--timeout", o->audit.timeout_s, "Seconds one request may take")
          ->capture_default_str()
          ->check(finite_number(0.0, 86400.0, "--timeout (seconds)", true));
      app.add_option("--target-format", o->audit.target_format,
                     "The target's weight format for the logprob bounds: auto (MODEL's: GGUF type, "
                     "quantization_config, dtype), f32, bf16, f16, fp8, mxfp4, int8, int4")
          ->default_str("auto");
      app.add_option("--quantized-reference", o->audit.quantized_reference,
                     "A float MODEL served quantized: Day0's own quantized copy of it (a `day0 quantize` "
                     "folder), whose run sets the bounds");
      app.add_option("--target-pid", o->audit.target_pid,
                     "The target's process on this host, whose resident memory, threads and open files the "
                     "soak samples (default: the process listening on the target's port, when the URL "
                     "names this host)")
          ->check(CLI::Range(1, 1 << 30));
      app.add_option("--out", o->out_dir, "Output folder for the report")->capture_default_str();
      app.add_flag("--strict", o->audit.strict,
                   "Warnings (a bad request refused with a 5xx rather than a 4xx) fail their stage");
      app.add_flag("--json", o->json, "Print report.json on stdout");
      return [o] { return run_audit_command(*o); };
    });

}  // namespace
}  // namespace day0::cli
