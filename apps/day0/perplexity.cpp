// day0 perplexity MODEL --file TEXT: perplexity with llama-perplexity's protocol, and KL divergence
// against a saved base run (align/perplexity.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "day0/align/perplexity.h"
#include "day0/io/progress.h"
#include "day0/runtime/model_loader.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::cli {
namespace {

struct PerplexityArgs {
  std::string model;
  std::string file;
  int64_t context = 512;
  int64_t batch = 0;  // 0: the context
  std::string kl_base;
  std::string save_logits;
  std::string backend = "cpu";
  std::string dtype = "f32";
  std::string kv_dtype = "bf16";
  int threads = 0;
  bool json = false;
};

int perplexity_command(const PerplexityArgs& a) {
  const char* name = "perplexity";
  std::ifstream in(a.file, std::ios::binary);
  if (!in) return report_error(name, not_found(fmt::format("{}: cannot open", a.file)));
  std::ostringstream text;
  text << in.rdbuf();
  const ActivationPrecision precision =
      a.dtype == "bf16" ? ActivationPrecision::kBF16 : ActivationPrecision::kF32;
  auto model = load_model(a.model, load_options_for(precision));
  if (!model.is_ok()) return report_error(name, model.status());
  auto tok = tokenizer::load_tokenizer(a.model);
  if (!tok.is_ok()) return report_error(name, tok.status());
  const std::vector<int32_t> tokens = (*tok)->encode(text.str(), {.add_special_tokens = true});
  for (int32_t t : tokens) {
    if (t < 0 || t >= model->spec.vocab_size) {
      return report_error(
          name, invalid_argument(fmt::format("token id {} is outside the model's vocabulary of {}", t,
                                             model->spec.vocab_size)));
    }
  }
  const std::vector<int32_t> window_tokens = perplexity_window_tokens(tokens, a.context);
  std::optional<KldBase> base;
  if (!a.kl_base.empty()) {
    auto opened = KldBase::open(a.kl_base);
    if (!opened.is_ok()) return report_error(name, opened.status());
    base = std::move(opened).value();
    Status st = check_kld_base_matches(*base, window_tokens, a.context, model->spec.vocab_size);
    if (!st.is_ok()) return report_error(name, st.with_context(a.kl_base));
  }
  EngineOptions eo;
  eo.precision = precision;
  eo.kv_dtype = parse_kv_dtype(a.kv_dtype).value_or(KvDtype::kBF16);
  auto engine = open_engine(*model, a.backend, eo, a.threads);
  if (!engine.is_ok()) return report_error(name, engine.status());

  std::unique_ptr<KldWriter> writer;
  if (!a.save_logits.empty() && static_cast<int64_t>(tokens.size()) >= 2 * a.context) {
    auto created = KldWriter::create(a.save_logits, model->spec.vocab_size, a.context, window_tokens);
    if (!created.is_ok()) return report_error(name, created.status());
    writer = std::move(created).value();
  }
  std::unique_ptr<KlAccumulator> kl;
  if (base) kl = std::make_unique<KlAccumulator>(*base);

  const auto& special = (*tok)->special_tokens();
  PerplexityOptions po;
  po.context = a.context;
  po.batch = a.batch > 0 ? a.batch : a.context;
  po.bos_id = special.add_bos && special.bos_id ? *special.bos_id : -1;
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  po.on_window = [&](int64_t done, int64_t total) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = seconds / static_cast<double>(done) * static_cast<double>(total - done);
    const int width = 24;
    const auto filled = static_cast<int>(width * done / total);
    const std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(width - filled, ' ');
    fmt::print(stderr, "{}perplexity [{}] {}/{} windows  {:.1f} s  ETA {:.1f} s{}", tty ? "\r" : "", bar,
               done, total, seconds, eta, tty && done < total ? "" : "\n");
    std::fflush(stderr);
  };
  ScoredLogitsSink sink = [&](std::span<const float> logits, int32_t target) -> Status {
    if (writer) D0_RETURN_IF_ERROR(writer->add(logits));
    if (kl) D0_RETURN_IF_ERROR(kl->add(logits, target));
    return Status::ok();
  };
  auto result = compute_perplexity(*engine->engine, tokens, po, sink);
  if (!result.is_ok()) return report_error(name, result.status());
  if (writer) {
    Status st = writer->finish();
    if (!st.is_ok()) return report_error(name, st);
  }
  const PerplexityResult& r = *result;
  nlohmann::ordered_json j = {{"model", a.model},
                              {"file", a.file},
                              {"precision", precision_name(eo.precision)},
                              {"kv_dtype", kv_dtype_name(eo.kv_dtype)},
                              {"context", r.context},
                              {"batch", po.batch},
                              {"tokens", tokens.size()},
                              {"windows", r.n_windows},
                              {"scored_tokens", r.n_scored},
                              {"ppl", r.ppl},
                              {"ppl_stderr", r.ppl_stderr},
                              {"window_ppl", r.window_ppl}};
  KlSummary s;
  if (kl) {
    s = kl->summary();
    j["kl"] = {{"base", a.kl_base},
               {"ppl_base", s.ppl_base},
               {"ppl_base_stderr", s.ppl_base_stderr},
               {"kld_mean", s.kld_mean},
               {"kld_stderr", s.kld_stderr},
               {"kld_median", s.kld_median},
               {"kld_p99", s.kld_p99},
               {"kld_max", s.kld_max},
               {"delta_p_mean", s.dp_mean},
               {"delta_p_stderr", s.dp_stderr},
               {"delta_p_rms", s.dp_rms},
               {"same_top1", s.top1_agreement},
               {"same_top1_stderr", s.top1_stderr}};
  }
  if (a.json) {
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("model      {} ({} activations, {} KV cache)\n", a.model, precision_name(eo.precision),
             kv_dtype_name(eo.kv_dtype));
  fmt::print("text       {}: {} tokens, {} windows of {}, {} tokens scored (second half of each window)\n",
             a.file, tokens.size(), r.n_windows, r.context, r.n_scored);
  std::string running;
  for (size_t i = 0; i < r.window_ppl.size(); ++i)
    running += fmt::format("[{}]{:.4f},", i + 1, r.window_ppl[i]);
  fmt::print("windows    {}\n", running);
  fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", r.ppl, r.ppl_stderr);
  if (kl) {
    fmt::print("\n====== KL divergence against {} ======\n", a.kl_base);
    fmt::print("Mean PPL(base): {:.6f} +/- {:.6f}\n", s.ppl_base, s.ppl_base_stderr);
    fmt::print("Mean    KLD: {:10.6f} +/- {:10.6f}\n", s.kld_mean, s.kld_stderr);
    fmt::print("Maximum KLD: {:10.6f}\n", s.kld_max);
    fmt::print("99.0%   KLD: {:10.6f}\n", s.kld_p99);
    fmt::print("Median  KLD: {:10.6f}\n", s.kld_median);
    fmt::print("Mean    Δp: {:6.3f} +/- {:5.3f} %\n", 100 * s.dp_mean, 100 * s.dp_stderr);
    fmt::print("RMS Δp    : {:6.3f} %\n", 100 * s.dp_rms);
    fmt::print("Same top p: {:6.3f} +/- {:5.3f} %\n", 100 * s.top1_agreement, 100 * s.top1_stderr);
  }
  if (writer) fmt::print("saved the scored log-probabilities to {}\n", a.save_logits);
  return kExitOk;
}

const Registrar kPerplexityCommand(
    "perplexity", "Perplexity of a text (llama-perplexity's protocol) and KL divergence against a base run",
    45, [](CLI::App& app) -> CommandRunner {
      auto a = std::make_shared<PerplexityArgs>();
      app.add_option("MODEL", a->model,
                     "checkpoint folder, or a .gguf file (converted once to F32 into a private cache folder)")
          ->required();
      app.add_option("--file", a->file, "UTF-8 text file to score")->required();
      app.add_option("--context", a->context,
                     "window size N: the text is cut into non-overlapping windows of N tokens and the second "
                     "half of each is scored (default 512)")
          ->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
      app.add_option("--batch", a->batch, "tokens per forward call within a window (default: the context)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
      app.add_option("--kl-base", a->kl_base,
                     "a .kld file saved by --save-logits from the base model on the same text and context: "
                     "report KL divergence, Δp and top-1 agreement against it");
      app.add_option("--save-logits", a->save_logits,
                     "write this run's log-probabilities at every scored position to a .kld file (format: "
                     "src/day0/align/perplexity.h)");
      app.add_option("--backend", a->backend, "backend: cpu (default), reference, partial");
      app.add_option("--dtype", a->dtype, "activation precision: f32 (default) or bf16")
          ->check(CLI::IsMember({"f32", "bf16"}));
      app.add_option("--kv-dtype", a->kv_dtype,
                     "KV cache element type: bf16 (default), f32 (exact), fp8 (E4M3)")
          ->check(CLI::IsMember({"bf16", "f32", "fp8"}));
      app.add_option("--threads", a->threads, "threads of the cpu backend (default: DAY0_THREADS or all)")
          ->check(CLI::Range(0, 4096));
      app.add_flag("--json", a->json, "JSON output");
      return [a] { return perplexity_command(*a); };
    });

}  // namespace
}  // namespace day0::cli
