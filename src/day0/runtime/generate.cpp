#include "day0/runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

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

Status validate_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return invalid_argument(
        fmt::format("sampling: temperature must be a finite number >= 0, found {}", p.temperature));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return invalid_argument(fmt::format("sampling: top_p must be in (0, 1], found {}", p.top_p));
  }
  if (p.top_k < 0) return invalid_argument(fmt::format("sampling: top_k must be >= 0, found {}", p.top_k));
  for (const auto& [name, value] : {std::pair{"presence_penalty", p.presence_penalty},
                                    std::pair{"frequency_penalty", p.frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f))
      return invalid_argument(fmt::format("sampling: {} must be in [-2, 2], found {}", name, value));
  }
  return Status::ok();
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

const char* finish_reason_after(int32_t token, int64_t steps, int64_t max_new,
                                std::span<const int32_t> stop_tokens, int64_t cached, int64_t context) {
  if (std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end()) return "stop";
  if (steps >= max_new || (context > 0 && cached >= context)) return "length";
  return nullptr;
}

std::span<const float> SequenceSampler::penalised(std::span<const float> logits) {
  if ((params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f) || counts_.empty())
    return logits;
  penalised_.assign(logits.begin(), logits.end());
  for (const auto& [token, count] : counts_) {
    penalised_[static_cast<size_t>(token)] -=
        params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
  }
  return penalised_;
}

GenerationStep SequenceSampler::next(Backend& backend, std::span<const float> logits) {
  return record(logits, pick_token(backend, penalised(logits), params_, steps_));
}

GenerationStep SequenceSampler::record(std::span<const float> logits, int32_t token) {
  GenerationStep s;
  s.chosen.token = token;
  if (logprobs_) s.chosen.logprob = token_logprob(logits, s.chosen.token);
  if (top_logprobs_ > 0) {
    for (int64_t id : top_n_indices(logits, top_logprobs_))
      s.top.push_back({static_cast<int32_t>(id), token_logprob(logits, static_cast<int32_t>(id))});
  }
  const auto at = std::lower_bound(counts_.begin(), counts_.end(), std::pair{s.chosen.token, int32_t{0}});
  if (at != counts_.end() && at->first == s.chosen.token) {
    ++at->second;
  } else {
    counts_.insert(at, {s.chosen.token, 1});
  }
  ++steps_;
  return s;
}

Status validate_request(const ModelSpec& spec, const GenerationRequest& r, int64_t held) {
  D0_RETURN_IF_ERROR(validate_sampling(r.sampling));
  if (r.prompt.empty()) return invalid_argument("empty prompt");
  for (int32_t id : r.prompt) {
    if (id < 0 || id >= spec.vocab_size)
      return invalid_argument(fmt::format("token id {} outside the vocabulary of {}", id, spec.vocab_size));
  }
  const int64_t context = spec.max_position_embeddings;
  if (context > 0 && held + static_cast<int64_t>(r.prompt.size()) > context) {
    return invalid_argument(
        fmt::format("the prompt has {} tokens{}, more than the model's context of {} tokens "
                    "(max_position_embeddings)",
                    r.prompt.size(), held > 0 ? fmt::format(" after {} cached", held) : "", context));
  }
  return Status::ok();
}

Result<std::vector<GenerationResult>> generate_batch(Engine& engine,
                                                     std::span<const GenerationRequest> requests) {
  const int64_t context = engine.spec().max_position_embeddings;
  const size_t n = requests.size();
  std::vector<std::optional<KvCache>> own(n);
  std::vector<KvCache*> caches(n);
  for (size_t i = 0; i < n; ++i) {
    const GenerationRequest& r = requests[i];
    if (r.cache == nullptr) own[i].emplace(engine.new_cache());
    caches[i] = r.cache ? r.cache : &*own[i];
    D0_RETURN_IF_ERROR(
        validate_request(engine.spec(), r, caches[i]->length()).with_context(fmt::format("request {}", i)));
  }
  std::vector<GenerationResult> results(n);
  std::vector<SequenceSampler> samplers;
  samplers.reserve(n);
  for (const GenerationRequest& r : requests) samplers.emplace_back(r.sampling, r.top_logprobs);
  std::vector<bool> active(n, false);
  std::vector<int32_t> last(n, -1);
  auto record = [&](size_t i, std::span<const float> row) {
    const GenerationRequest& r = requests[i];
    GenerationResult& g = results[i];
    g.steps.push_back(samplers[i].next(engine.backend(), row));
    const int32_t token = g.steps.back().chosen.token;
    last[i] = token;
    const bool go_on = r.on_token ? r.on_token(g.steps.back()) : true;
    const char* finish = finish_reason_after(token, static_cast<int64_t>(g.steps.size()), r.max_new,
                                             r.stop_tokens, caches[i]->length(), context);
    if (!go_on) finish = "stop";
    if (finish != nullptr) {
      g.finish_reason = finish;
      active[i] = false;
    }
  };

  std::vector<SequenceStep> batch;
  std::vector<size_t> owner;
  batch.reserve(n);
  owner.reserve(n);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    results[i].prompt_tokens = static_cast<int64_t>(requests[i].prompt.size());
    if (requests[i].max_new <= 0) continue;
    active[i] = true;
    results[i].steps.reserve(static_cast<size_t>(requests[i].max_new));
    batch.push_back({caches[i], requests[i].prompt});
    owner.push_back(i);
  }
  if (batch.empty()) return results;
  D0_ASSIGN_OR_RETURN(ConstMatrix logits, engine.forward(batch, true));
  for (size_t b = 0; b < owner.size(); ++b) record(owner[b], logits.row_span(static_cast<int64_t>(b)));
  const double prefill = seconds_since(t0);
  for (auto& g : results) g.prefill_seconds = prefill;

  const auto t1 = std::chrono::steady_clock::now();
  for (;;) {
    batch.clear();
    owner.clear();
    for (size_t i = 0; i < n; ++i) {
      if (!active[i]) continue;
      batch.push_back({caches[i], std::span<const int32_t>(&last[i], 1)});
      owner.push_back(i);
    }
    if (batch.empty()) break;
    D0_ASSIGN_OR_RETURN(logits, engine.forward(batch, true));
    for (size_t b = 0; b < owner.size(); ++b) record(owner[b], logits.row_span(static_cast<int64_t>(b)));
  }
  const double decode = seconds_since(t1);
  for (auto& g : results) g.decode_seconds = decode;
  return results;
}

Result<GenerationResult> generate(Engine& engine, std::span<const int32_t> prompt, int64_t max_new,
                                  const SamplingParams& params, int64_t top_logprobs,
                                  const TokenCallback& on_token) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_new = max_new;
  r.sampling = params;
  r.top_logprobs = top_logprobs;
  r.on_token = on_token;
  D0_ASSIGN_OR_RETURN(std::vector<GenerationResult> all, generate_batch(engine, std::span(&r, 1)));
  return std::move(all.front());
}

}  // namespace day0
