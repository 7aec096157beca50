#pragma once
// Generation spot checks (the adapt stage "generation"): a fixed set of chat prompts — multilingual
// text, long-form text, instruction following — continued greedily by the model, and compared token
// by token with the greedy continuations of a reference (transformers, through
// tools/reference/dump_reference.py spot) and, for a quantized variant, with its unquantized base.
// The prompt set is one JSON file (report/spot_prompts.json) that the library embeds and the reference
// tool reads, so both sides render the same messages.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/runtime/engine.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::report {

inline constexpr const char* kSpotPromptsFormat = "day0-spot-prompts/1";
inline constexpr const char* kSpotReferenceFormat = "day0-spot-reference/1";
// Bounds on what a prompt set or a reference file may ask for.
inline constexpr int64_t kMaxSpotPrompts = 256;
inline constexpr int64_t kMaxSpotNewTokens = 4096;

struct SpotPrompt {
  std::string id;    // stable name, e.g. "multilingual-fr"
  std::string kind;  // "multilingual" | "long-form" | "instruction"
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content}, ...]
  int64_t max_new_tokens = 0;
};

// The embedded prompt set (report/spot_prompts.json).
const std::vector<SpotPrompt>& spot_prompts();
// Parses a prompt set; `where` names the source in messages.
Result<std::vector<SpotPrompt>> parse_spot_prompts(std::string_view text, const std::string& where);

// One prompt of a reference file: the prompt as the reference tokenised it and its greedy
// continuation (stop token included when it stopped on one).
struct SpotReferenceEntry {
  SpotPrompt prompt;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy_ids;
  std::string greedy_text;
};

struct SpotReference {
  std::string producer;  // "transformers"
  std::string version;   // "transformers X; torch Y"
  std::string dtype;     // the precision the reference computed in ("f32", "bf16")
  std::vector<SpotReferenceEntry> entries;
};

// A `day0-spot-reference/1` file: every size and id is checked (ids against `vocab_size` when > 0).
Result<SpotReference> read_spot_reference(const std::filesystem::path& path, int64_t vocab_size = 0);
Result<SpotReference> parse_spot_reference(std::string_view text, const std::string& where,
                                           int64_t vocab_size = 0);

// What the model produced for one prompt.
struct SpotOutput {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;  // generated, stop token included
  std::string text;          // decoded, special tokens skipped
  std::string finish_reason;
};

// Renders every prompt with the tokenizer's chat template and continues all of them greedily in one
// batch (the library's generator); a prompt stops at the tokenizer's stop tokens or its budget.
Result<std::vector<SpotOutput>> run_spot_prompts(Engine& engine, const tokenizer::Tokenizer& tok,
                                                 std::span<const SpotPrompt> prompts);

struct GreedyComparison {
  int64_t reference_tokens = 0;   // length of the reference continuation
  int64_t compared = 0;           // positions both continuations have
  int64_t first_divergence = -1;  // first position where they differ (a length difference counts); -1: none
  double prefix_agreement = 1;    // tokens before the first divergence / reference_tokens
  double token_agreement = 1;     // equal tokens at the same position / max of the two lengths
};
GreedyComparison compare_greedy(std::span<const int32_t> ours, std::span<const int32_t> reference);

// True when one token fills more than three quarters of an output of at least 16 tokens: a model that
// loops on one token (broken weights, a wrong norm) rather than writing text.
bool degenerate_output(std::span<const int32_t> ids);

}  // namespace day0::report
