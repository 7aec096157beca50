// Stage "generation": spot checks of generation quality (multilingual, long-form, instruction
// following) on the run target through its chat template, greedy. Compared token by token with the
// reference's greedy continuations when --spot-reference is given, and with the unquantized base's
// outputs when --spot-base is given; the texts go side by side into the HTML report for a person to
// read. Skipped, with the reason, when the run target has no tokenizer or chat template (a miniature).
#include <fmt/format.h>

#include <algorithm>

#include "day0/report/adapt_context.h"
#include "day0/report/spot_check.h"
#include "day0/report/stages/run_target.h"
#include "day0/runtime/model_loader.h"

namespace day0::report {
namespace {

std::string last_user_text(const SpotPrompt& prompt) {
  for (auto it = prompt.messages.rbegin(); it != prompt.messages.rend(); ++it) {
    if ((*it)["role"] == "user") return (*it)["content"].get<std::string>();
  }
  return "";
}

// `agreed` is the text of the tokens before the first divergence (the report marks what follows).
nlohmann::json comparison_json(const GreedyComparison& c, const tokenizer::Tokenizer& tok,
                               std::span<const int32_t> ours) {
  const size_t agreed = c.first_divergence < 0 ? ours.size() : static_cast<size_t>(c.first_divergence);
  return {
      {"reference_tokens", c.reference_tokens},
      {"first_divergence", c.first_divergence},
      {"prefix_agreement", c.prefix_agreement},
      {"token_agreement", c.token_agreement},
      {"agreed_text", tok.decode(ours.first(std::min(agreed, ours.size())), /*skip_special_tokens=*/true)}};
}

// Mean prefix agreement over `comparisons`.
double mean_prefix(const std::vector<GreedyComparison>& comparisons) {
  if (comparisons.empty()) return 1.0;
  double sum = 0;
  for (const auto& c : comparisons) sum += c.prefix_agreement;
  return sum / static_cast<double>(comparisons.size());
}

// The base model's outputs on the same prompts (same backend and KV dtype as the run target).
Result<std::vector<SpotOutput>> run_base(const AdaptContext& ctx, const tokenizer::Tokenizer& tok,
                                         std::span<const SpotPrompt> prompts, const EngineOptions& options) {
  D0_ASSIGN_OR_RETURN(LoadedModel base,
                      load_model(ctx.options.spot_base, load_options_for(options.precision)));
  D0_ASSIGN_OR_RETURN(EngineHandle handle, open_engine(base, ctx.options.backend, options));
  auto outputs = run_spot_prompts(*handle.engine, tok, prompts);
  if (!outputs.is_ok()) return outputs.status().with_context("--spot-base " + ctx.options.spot_base);
  return outputs;
}

}  // namespace

void run_generation_stage(AdaptContext& ctx, StageResult& out) {
  auto run = open_run_engine(ctx);
  if (!run.is_ok()) {
    if (run.status().code() == StatusCode::kFailedPrecondition)
      return stage_skip(out, run.status().message());
    return stage_fail(out, run.status().to_string());
  }
  RunEngine& target = **run;
  const bool asked = !ctx.options.spot_reference.empty() || !ctx.options.spot_base.empty();
  if (target.target.label == "the miniature") {
    const std::string why =
        "the run target is the miniature (random weights, no tokenizer): spot checks need the "
        "real model";
    return asked ? stage_fail(out, why + ", but --spot-reference / --spot-base were given")
                 : stage_skip(out, why);
  }
  auto loaded_tok = tokenizer::load_tokenizer(target.target.folder);
  if (!loaded_tok.is_ok()) {
    const std::string why = "no tokenizer with the run target: " + loaded_tok.status().to_string();
    return asked ? stage_fail(out, why) : stage_skip(out, why);
  }
  const tokenizer::Tokenizer& tok = **loaded_tok;
  if (!tok.chat_template()) {
    const std::string why = "the tokenizer of " + target.target.folder + " has no chat template";
    return asked ? stage_fail(out, why) : stage_skip(out, why);
  }

  std::vector<SpotPrompt> prompts = spot_prompts();
  SpotReference reference;
  const bool with_reference = !ctx.options.spot_reference.empty();
  if (with_reference) {
    auto read = read_spot_reference(ctx.options.spot_reference, target.model.spec.vocab_size);
    if (!read.is_ok()) return stage_fail(out, read.status().to_string());
    reference = std::move(read).value();
    prompts.clear();
    for (const auto& e : reference.entries) prompts.push_back(e.prompt);
  }
  auto outputs = run_spot_prompts(*target.handle.engine, tok, prompts);
  if (!outputs.is_ok()) return stage_fail(out, outputs.status().to_string());
  std::vector<SpotOutput> base;
  if (!ctx.options.spot_base.empty()) {
    auto ran = run_base(ctx, tok, prompts, target.handle.engine->options());
    if (!ran.is_ok()) return stage_fail(out, ran.status().to_string());
    base = std::move(ran).value();
  }

  std::vector<std::string> problems;
  std::vector<GreedyComparison> against_reference, against_base;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SpotOutput& o = (*outputs)[i];
    nlohmann::json row = {{"id", prompts[i].id},
                          {"kind", prompts[i].kind},
                          {"prompt", last_user_text(prompts[i])},
                          {"prompt_tokens", o.prompt_ids.size()},
                          {"output", o.text},
                          {"output_tokens", o.ids.size()},
                          {"finish_reason", o.finish_reason}};
    const bool degenerate = degenerate_output(o.ids);
    row["degenerate"] = degenerate;
    if (degenerate) problems.push_back(fmt::format("{}: the output repeats one token", prompts[i].id));
    if (with_reference) {
      const SpotReferenceEntry& e = reference.entries[i];
      const GreedyComparison prompt_cmp = compare_greedy(o.prompt_ids, e.prompt_ids);
      const GreedyComparison cmp = compare_greedy(o.ids, e.greedy_ids);
      row["reference"] = comparison_json(cmp, tok, o.ids);
      row["reference"]["text"] = e.greedy_text;
      row["reference"]["prompt_ids_match"] = prompt_cmp.first_divergence < 0;
      if (prompt_cmp.first_divergence >= 0) {
        // A different prompt makes the continuations incomparable: the template or tokenizer is wrong.
        problems.push_back(fmt::format(
            "{}: the chat template and tokenizer give other prompt ids than the reference's from position {} "
            "({} vs {} ids)",
            prompts[i].id, prompt_cmp.first_divergence, o.prompt_ids.size(), e.prompt_ids.size()));
      } else {
        against_reference.push_back(cmp);
      }
    }
    if (!base.empty()) {
      against_base.push_back(compare_greedy(o.ids, base[i].ids));
      row["base"] = comparison_json(against_base.back(), tok, o.ids);
      row["base"]["text"] = base[i].text;
    }
    rows.push_back(std::move(row));
  }

  const double min_agreement = ctx.options.spot_min_agreement;
  out.evidence = {{"target", target.target.label},
                  {"kv_dtype", kv_dtype_name(target.handle.engine->options().kv_dtype)},
                  {"prompts", rows},
                  {"min_agreement", min_agreement}};
  std::string summary = fmt::format("{} prompts on {}", prompts.size(), target.target.label);
  if (with_reference) {
    const double mean = mean_prefix(against_reference);
    out.evidence["reference"] = {{"file", ctx.options.spot_reference},
                                 {"producer", reference.producer},
                                 {"version", reference.version},
                                 {"dtype", reference.dtype},
                                 {"mean_prefix_agreement", mean}};
    summary += fmt::format("; greedy agreement with {} ({}): {:.0f}% of tokens before the first divergence",
                           reference.producer, reference.dtype, 100 * mean);
    if (!against_reference.empty() && mean < min_agreement) {
      problems.push_back(
          fmt::format("mean agreement with the reference {:.2f} is below --spot-min-agreement {:.2f}", mean,
                      min_agreement));
    }
  }
  if (!base.empty()) {
    const double mean = mean_prefix(against_base);
    out.evidence["base"] = {{"model", ctx.options.spot_base}, {"mean_prefix_agreement", mean}};
    summary += fmt::format("; agreement with the base model: {:.0f}%", 100 * mean);
    if (mean < min_agreement) {
      problems.push_back(
          fmt::format("mean agreement with the base model {:.2f} is below --spot-min-agreement {:.2f}", mean,
                      min_agreement));
    }
  }
  if (!asked) summary += "; no --spot-reference or --spot-base: the outputs are in the report for reading";
  if (!problems.empty()) {
    std::string reason = problems.front();
    if (problems.size() > 1) reason += fmt::format(" (and {} more problems)", problems.size() - 1);
    out.summary = summary;
    return stage_fail(out, reason);
  }
  stage_pass(out, summary);
}

}  // namespace day0::report
