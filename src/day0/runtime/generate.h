#pragma once
// The one generation path of the library (run, run --interactive, align, adapt and the server use it):
// a batched generator over the engine. All sequences of a call are pre-filled in one step, then
// decoded together one token per step; each picks its tokens greedily or by sampling (temperature,
// top-p, top-k, seed; the backend's deterministic `sample` kernel) and stops at its stop tokens, its
// token budget or the model's context limit. Records log-probabilities and timing (time to first
// token, prefill and decode tokens per second).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "day0/runtime/engine.h"

namespace day0 {

struct SamplingParams {
  bool greedy = true;
  float temperature = 1.0f;  // used when !greedy; 0 means greedy
  float top_p = 1.0f;        // (0, 1]
  int64_t top_k = 0;         // 0: no cut
  uint64_t seed = 0;
};
// InvalidArgument for a NaN, infinite or negative temperature, top_p outside (0, 1], top_k < 0.
Status validate_sampling(const SamplingParams& params);

struct TokenLogprob {
  int32_t token = -1;
  double logprob = 0;  // log softmax of the raw logits (temperature 1)
};

struct GenerationStep {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the `top_logprobs` most likely tokens
};

// Why a sequence stopped: "stop" (a stop token, or the token callback said so), "length" (max_new
// reached, or the model's context limit: max_position_embeddings).
struct GenerationResult {
  std::vector<GenerationStep> steps;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // = time to first token (prefill + first pick)
  double decode_seconds = 0;   // the remaining tokens
  std::string finish_reason = "length";
  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;  // (new tokens - 1) / decode_seconds
  std::vector<int32_t> tokens() const;
};

// Picks the next token from one logits row (step counts the generated tokens, for the seed stream).
int32_t pick_token(Backend& backend, std::span<const float> logits, const SamplingParams& params,
                   int64_t step);
// log softmax of `logits` at `token`.
double token_logprob(std::span<const float> logits, int32_t token);

// Called after each generated token (streaming output); returning false stops that sequence there
// (finish_reason "stop"). Timing still covers every token generated.
using TokenCallback = std::function<bool(const GenerationStep& step)>;

struct GenerationRequest {
  std::span<const int32_t> prompt;  // new tokens, after what `cache` already holds (at least one)
  int64_t max_new = 16;
  SamplingParams sampling;
  std::span<const int32_t> stop_tokens;  // the token is recorded, then the sequence stops
  int64_t top_logprobs = 0;
  // A cache to continue (an interactive conversation: only the new turn is pre-filled); null: a fresh
  // one. Every generated token but the last is appended to it.
  KvCache* cache = nullptr;
  TokenCallback on_token;
};

// Runs every request to completion, batched. InvalidArgument (before any work) for bad sampling
// parameters or a prompt that does not fit in the model's context; the engine's error otherwise.
Result<std::vector<GenerationResult>> generate_batch(Engine& engine,
                                                     std::span<const GenerationRequest> requests);

// One sequence from a fresh cache.
Result<GenerationResult> generate(Engine& engine, std::span<const int32_t> prompt, int64_t max_new,
                                  const SamplingParams& params, int64_t top_logprobs = 0,
                                  const TokenCallback& on_token = nullptr);

}  // namespace day0
