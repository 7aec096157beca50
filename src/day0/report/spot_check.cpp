// The embedded prompt set and the spot-check run (parsers and comparison: spot_reference.cpp).
#include "day0/report/spot_check.h"

#include "day0/core/error.h"
#include "day0/runtime/generate.h"
#include "day0/tokenizer/text_prompt.h"

namespace day0::report {
namespace {

// The embedded prompt set: report/spot_prompts.json, pasted in at configure time.
constexpr std::string_view kEmbeddedSpotPrompts =
#include "day0/report/spot_prompts.inc"
    ;

}  // namespace

const std::vector<SpotPrompt>& spot_prompts() {
  static const std::vector<SpotPrompt> prompts = [] {
    auto parsed = parse_spot_prompts(kEmbeddedSpotPrompts, "report/spot_prompts.json");
    D0_CHECK_MSG(parsed.is_ok(),
                 "the embedded spot-check prompts do not parse: " + parsed.status().to_string());
    return std::move(parsed).value();
  }();
  return prompts;
}

Result<std::vector<SpotOutput>> run_spot_prompts(Engine& engine, const tokenizer::Tokenizer& tok,
                                                 std::span<const SpotPrompt> prompts) {
  if (prompts.empty()) return invalid_argument("spot checks: no prompts");
  std::vector<SpotOutput> outputs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto ids = encode_chat_prompt(tok, prompts[i].messages, engine.spec().vocab_size);
    if (!ids.is_ok()) return ids.status().with_context("spot check \"" + prompts[i].id + "\"");
    outputs[i].prompt_ids = std::move(ids).value();
  }
  const std::vector<int32_t>& stops = tok.special_tokens().stop_ids;
  std::vector<GenerationRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].prompt = outputs[i].prompt_ids;
    requests[i].max_new = prompts[i].max_new_tokens;
    requests[i].sampling = SamplingParams{};  // greedy
    requests[i].stop_tokens = stops;
  }
  D0_ASSIGN_OR_RETURN(std::vector<GenerationResult> results, generate_batch(engine, requests));
  for (size_t i = 0; i < prompts.size(); ++i) {
    outputs[i].ids = results[i].tokens();
    outputs[i].text = tok.decode(outputs[i].ids, /*skip_special_tokens=*/true);
    outputs[i].finish_reason = results[i].finish_reason;
  }
  return outputs;
}

}  // namespace day0::report
