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
  // OpenAI's penalties over the tokens generated so far (not the prompt): each candidate's logit is
  // lowered by presence_penalty once it occurred and by frequency_penalty times its count. Both in
  // [-2, 2]; they change what is picked (greedy too), not the recorded log-probabilities.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};
// InvalidArgument for a NaN, infinite or negative temperature, top_p outside (0, 1], top_k < 0, a
// penalty outside [-2, 2].
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

// One sequence's choice of tokens, step after step: penalties over what it generated so far, the pick
// (greedy, or sampling with one seed stream per step), log-probabilities of the raw logits. Every
// generation path drives its sequences through it (generate_batch below, the server's scheduler), so
// a token depends only on the logits row, the parameters and the step number, never on the batch.
class SequenceSampler {
 public:
  // `logprobs` false: nobody reads the chosen token's log-probability (a server request without
  // `logprobs`), so the full-vocabulary log-softmax is skipped and chosen.logprob stays 0; the pick is
  // the same either way. top_logprobs > 0 implies it.
  SequenceSampler(SamplingParams params, int64_t top_logprobs, bool logprobs = true)
      : params_(params), top_logprobs_(top_logprobs), logprobs_(logprobs || top_logprobs > 0) {}
  // Picks the token of step steps() from `logits` [vocab] and records it.
  GenerationStep next(Backend& backend, std::span<const float> logits);
  // `logits` [vocab] after the penalties over what was generated so far: what a pick draws from (a view
  // of scratch valid until the next call, or `logits` itself when no penalty applies).
  std::span<const float> penalised(std::span<const float> logits);
  // Records `token`, picked elsewhere from `logits` (speculative decoding's resample), as step steps().
  GenerationStep record(std::span<const float> logits, int32_t token);
  int64_t steps() const { return steps_; }
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  int64_t top_logprobs_ = 0;
  bool logprobs_ = true;
  int64_t steps_ = 0;
  std::vector<std::pair<int32_t, int32_t>> counts_;  // (token, times generated), sorted by token
  std::vector<float> penalised_;                     // [vocab] scratch when a penalty is set
};

// Why a sequence stops after picking `token`, its `steps`-th token, with `cached` tokens in its cache
// (null: it goes on): "stop" at a stop token, "length" at its budget or when no position is left in
// the model's context (`context` <= 0: no limit) to feed the token at.
const char* finish_reason_after(int32_t token, int64_t steps, int64_t max_new,
                                std::span<const int32_t> stop_tokens, int64_t cached, int64_t context);

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

// InvalidArgument for bad sampling parameters, an empty prompt, a token outside the vocabulary, or a
// prompt that does not fit in the model's context after the `held` tokens its cache holds.
Status validate_request(const ModelSpec& spec, const GenerationRequest& request, int64_t held);

// Runs every request to completion, batched. InvalidArgument (before any work) for bad sampling
// parameters or a prompt that does not fit in the model's context; the engine's error otherwise.
Result<std::vector<GenerationResult>> generate_batch(Engine& engine,
                                                     std::span<const GenerationRequest> requests);

// One sequence from a fresh cache.
Result<GenerationResult> generate(Engine& engine, std::span<const int32_t> prompt, int64_t max_new,
                                  const SamplingParams& params, int64_t top_logprobs = 0,
                                  const TokenCallback& on_token = nullptr);

}  // namespace day0
