#pragma once
// `day0 audit`: an OpenAI-compatible server (vLLM, SGLang, trtllm-serve, llama-server, Ollama, day0
// serve) serving MODEL, checked against Day0's own tokenizer, chat template and reference forward pass
// of the same checkpoint. Six stages, each with a verdict, its evidence and its time, as adapt's
// (report/report.h): they go into the same report, and `adapt MODEL --target URL` appends them to its
// checklist. docs/audit.md says what each stage sends and how it judges; docs/commands.md the options.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/report/report.h"

namespace day0::audit {

struct AuditOptions {
  std::string model;              // the checkpoint the target serves: folder or .gguf (weights + tokenizer)
  std::string tokenizer;          // "": MODEL's own; else a folder or .gguf whose tokenizer MODEL uses
  std::string target;             // base URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted)
  std::string served_model_name;  // "": the first id of GET /v1/models
  std::string api_key;            // sent as a Bearer token ("" none)
  std::vector<int> concurrency = {1, 4, 16, 64};
  double soak_seconds = 0;           // 0: no soak (the speed stage says so)
  int new_tokens = 24;               // greedy tokens per logprob / spot-check completion
  int bench_requests_per_level = 0;  // 0: 2 x concurrency, at least 8
  int64_t context = 0;               // 0: what the target says (/v1/models, /props), else the model's
  double timeout_s = 300;            // per request
  // The target's weight format ("" / "auto": MODEL's, logprob_bounds.h) and, for a float MODEL that
  // the target serves quantized, Day0's own quantized copy of it (a `day0 quantize` folder).
  std::string target_format;
  std::string quantized_reference;
  bool strict = false;  // --strict: a stage's warnings fail it (report::apply_strict)
  // The target's process on this host, whose resident memory, threads and open files the soak samples;
  // 0: the process listening on the target's port when the URL names this host (none found: not sampled).
  int target_pid = 0;
};

// The stages in run order: id and title ("audit-tokens" "Target: tokens and template", ...).
struct AuditStageDescriptor {
  std::string id;
  std::string title;
};
const std::vector<AuditStageDescriptor>& audit_stages();

struct AuditSession;  // the reference model and the connection, loaded once

// Loads MODEL (weights, tokenizer, template) and reaches the target (served model name, context).
// A Status for what makes every stage meaningless: MODEL unreadable, the target unreachable.
Result<std::shared_ptr<AuditSession>> open_audit(const AuditOptions& options);

// Runs the stages in order; `on_stage` sees each as it ends. Appends to `stages`.
void run_audit_stages(AuditSession& session, std::vector<report::StageResult>& stages,
                      const std::function<void(const report::StageResult&)>& on_stage);

// open_audit + run_audit_stages into a report (model, backend "target URL", machine, verdict).
Result<report::Report> run_audit(const AuditOptions& options,
                                 const std::function<void(const report::StageResult&)>& on_stage);

// "1,4,16,64" -> {1, 4, 16, 64}; each in [1, 4096].
Result<std::vector<int>> parse_concurrency(const std::string& text);
// "90", "90s", "15m", "2h" -> seconds.
Result<double> parse_duration(const std::string& text);

}  // namespace day0::audit
