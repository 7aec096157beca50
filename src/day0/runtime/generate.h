#pragma once
// The generation loop: prefill the prompt, then decode one token at a time with the KV cache, picking
// each token greedily or by sampling (temperature, top-p, top-k, seed; the backend's deterministic
// `sample` kernel). Records log-probabilities and timing (time to first token, prefill and decode
// tokens per second).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "day0/runtime/engine.h"

namespace day0 {

struct SamplingParams {
  bool greedy = true;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;
  uint64_t seed = 0;
};

struct TokenLogprob {
  int32_t token = -1;
  double logprob = 0;  // log softmax of the raw logits (temperature 1)
};

struct GenerationStep {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the `top_logprobs` most likely tokens
};

struct GenerationResult {
  std::vector<GenerationStep> steps;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // = time to first token (prefill + first pick)
  double decode_seconds = 0;   // the remaining tokens
  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;  // (new tokens - 1) / decode_seconds
  std::vector<int32_t> tokens() const;
};

// Picks the next token from one logits row (step counts the generated tokens, for the seed stream).
int32_t pick_token(Backend& backend, std::span<const float> logits, const SamplingParams& params,
                   int64_t step);
// log softmax of `logits` at `token`.
double token_logprob(std::span<const float> logits, int32_t token);

// Called after each generated token (streaming output); returning false stops generation there
// (a stop token). Timing still covers every token generated.
using TokenCallback = std::function<bool(const GenerationStep& step)>;

GenerationResult generate(Engine& engine, std::span<const int32_t> prompt, int64_t max_new,
                          const SamplingParams& params, int64_t top_logprobs = 0,
                          const TokenCallback& on_token = nullptr);

}  // namespace day0
