// day0 align: compare the engine with a reference dump (or our reference backend): logits, layer by
// layer, greedy continuations; exit 1 when outside the thresholds, 2 on bad input.
#include <fmt/format.h>

#include "command.h"
#include "day0/align/align_model.h"

namespace day0::cli {
namespace {

struct AlignCliOptions {
  AlignRequest request;
  std::string dtype = "auto";
  std::string kv_dtype = "auto";
  std::string against;
  std::string mla = "auto";
  bool mla_given = false;
  bool json = false;
};

int align_command(AlignCliOptions o) {
  AlignRequest& r = o.request;
  // "auto" (and an absent --backend or --mla) leave the setting to align_model: the dump's own
  // settings when day0 made it, else the defaults.
  if (o.dtype != "auto")
    r.precision = o.dtype == "bf16" ? ActivationPrecision::kBF16 : ActivationPrecision::kF32;
  if (o.kv_dtype != "auto") r.kv_dtype = parse_kv_dtype(o.kv_dtype);
  if (o.mla_given)
    r.mla = o.mla == "naive" ? MlaMode::kNaive : o.mla == "absorbed" ? MlaMode::kAbsorbed : MlaMode::kAuto;
  if (!o.against.empty()) {
    if (o.against != "reference") {
      return report_error("align", invalid_argument("--against takes \"reference\" (our reference backend)"));
    }
    r.against_reference = true;
  }
  if (r.reference_path.empty() && !r.against_reference) {
    return report_error("align", invalid_argument("give --reference DUMP or --against reference"));
  }
  auto report = align_model(r);
  if (!report.is_ok()) return report_error("align", report.status());
  if (o.json) {
    // The text report carries its warnings; JSON readers get them on stderr too.
    for (const std::string& w : report->warnings) fmt::print(stderr, "align: warning: {}\n", w);
    fmt::print("{}\n", align_report_json(*report).dump(2));
  } else {
    fmt::print("{}", align_report_text(*report));
  }
  return report->pass() ? kExitOk : kExitCheckFailed;
}

const Registrar kAlignCommand(
    "align",
    "Compare the engine with a Hugging Face reference dump: logits, layer by layer, greedy generation", 55,
    [](CLI::App& app) -> CommandRunner {
      auto o = std::make_shared<AlignCliOptions>();
      app.add_option("model", o->request.model, "checkpoint folder (config.json + safetensors)")->required();
      app.add_option("--reference", o->request.reference_path, "day0-reference/1 dump (tools/reference/)");
      app.add_option("--backend", o->request.backend,
                     "backend measured: cpu, reference, partial (default: the dump's backend when day0 "
                     "made it with run --dump, else cpu)");
      app.add_option("--kv-dtype", o->kv_dtype,
                     "KV cache element type: auto (default: the dump's when day0 made it with run --dump; "
                     "else f32 with f32 activations so the comparison is exact, bf16 with bf16), bf16, "
                     "f32, fp8")
          ->check(CLI::IsMember({"auto", "bf16", "f32", "fp8"}));
      app.add_option("--dtype", o->dtype,
                     "activation precision: auto (default: the dump's when day0 made it with run --dump, "
                     "else f32), f32, bf16")
          ->check(CLI::IsMember({"auto", "f32", "bf16"}));
      app.add_option("--against", o->against, "\"reference\": compare --backend with our reference backend");
      app.add_option("--prompt-ids", o->request.prompt_ids,
                     "prompts for --against without a dump: 1,2,3;4,5");
      app.add_option("--mla", o->mla,
                     "MLA form: auto (default, or the dump's when day0 made it), naive, absorbed")
          ->check(CLI::IsMember({"auto", "naive", "absorbed"}))
          ->each([o](const std::string&) { o->mla_given = true; });
      app.add_option("--threads", o->request.n_threads, "threads of the cpu backend")
          ->check(CLI::Range(0, 4096));
      app.add_option("--max-abs-err", o->request.thresholds.max_abs_err_of_range,
                     "max logit abs error as a share of the logit range")
          ->check(finite_number(0.0, 1e6, "--max-abs-err"));
      app.add_option("--kl-mean", o->request.thresholds.kl_mean, "max mean KL(reference || engine)")
          ->check(finite_number(0.0, 1e6, "--kl-mean"));
      app.add_option("--kl-max", o->request.thresholds.kl_max, "max KL at any position")
          ->check(finite_number(0.0, 1e6, "--kl-max"));
      app.add_option("--min-same-top1", o->request.thresholds.min_same_top1,
                     "min share of positions with the same argmax (0..1)")
          ->check(finite_number(0.0, 1.0, "--min-same-top1 (a share)"));
      app.add_option("--max-ppl-ratio-dev", o->request.thresholds.max_ppl_ratio_dev,
                     "max |perplexity ratio - 1|")
          ->check(finite_number(0.0, 1e6, "--max-ppl-ratio-dev"));
      app.add_option("--greedy-top-n", o->request.thresholds.greedy_top_n,
                     "top-N rule at the first greedy divergence (default 5)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
      app.add_option("--layer-cosine", o->request.thresholds.layer_cosine,
                     "layer rule: cosine floor (default 0.99)")
          ->check(finite_number(-1.0, 1.0, "--layer-cosine (a cosine)"));
      app.add_option("--layer-abs", o->request.thresholds.layer_abs,
                     "layer rule: MaxAbsErr floor paired with it (default 0.001)")
          ->check(finite_number(0.0, 1e30, "--layer-abs"));
      app.add_flag("--json", o->json, "JSON output");
      return [o] { return align_command(*o); };
    });

}  // namespace
}  // namespace day0::cli
