#include "day0/runtime/generate.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "day0/align/logit_metrics.h"

namespace day0 {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

double GenerationResult::prefill_tokens_per_second() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0.0;
}

double GenerationResult::decode_tokens_per_second() const {
  const auto n = static_cast<double>(steps.size()) - 1;
  return decode_seconds > 0 && n > 0 ? n / decode_seconds : 0.0;
}

std::vector<int32_t> GenerationResult::tokens() const {
  std::vector<int32_t> out;
  for (const auto& s : steps) out.push_back(s.chosen.token);
  return out;
}

double token_logprob(std::span<const float> logits, int32_t token) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return static_cast<double>(logits[static_cast<size_t>(token)]) - mx - std::log(sum);
}

int32_t pick_token(Backend& backend, std::span<const float> logits, const SamplingParams& params,
                   int64_t step) {
  int32_t out = -1;
  const ConstMatrix row(logits.data(), 1, static_cast<int64_t>(logits.size()));
  if (params.greedy || params.temperature <= 0) {
    backend.argmax({row, std::span<int32_t>(&out, 1)});
  } else {
    // One seed stream per generated token: the draw for step s does not depend on earlier draws.
    const uint64_t seed = params.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step);
    backend.sample({row, params.temperature, params.top_p, params.top_k, seed, std::span<int32_t>(&out, 1)});
  }
  backend.synchronize();
  return out;
}

GenerationResult generate(Engine& engine, std::span<const int32_t> prompt, int64_t max_new,
                          const SamplingParams& params, int64_t top_logprobs, const TokenCallback& on_token) {
  GenerationResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (max_new <= 0 || prompt.empty()) return r;
  KvCache cache = engine.new_cache();
  // Returns whether generation goes on.
  auto record = [&](const FloatMatrix& logits, int64_t step) -> bool {
    const auto row = logits.row(logits.rows - 1);
    GenerationStep s;
    s.chosen.token = pick_token(engine.backend(), row, params, step);
    s.chosen.logprob = token_logprob(row, s.chosen.token);
    if (top_logprobs > 0) {
      for (int64_t id : top_n_indices(row, top_logprobs)) {
        s.top.push_back({static_cast<int32_t>(id), token_logprob(row, static_cast<int32_t>(id))});
      }
    }
    r.steps.push_back(std::move(s));
    return on_token ? on_token(r.steps.back()) : true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  const SequenceStep first{&cache, prompt};
  bool more = record(engine.forward(std::span(&first, 1), true), 0);
  r.prefill_seconds = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  for (int64_t i = 1; i < max_new && more; ++i) {
    const int32_t last = r.steps.back().chosen.token;
    const SequenceStep step{&cache, std::span<const int32_t>(&last, 1)};
    more = record(engine.forward(std::span(&step, 1), true), i);
  }
  r.decode_seconds = seconds_since(t1);
  return r;
}

}  // namespace day0
