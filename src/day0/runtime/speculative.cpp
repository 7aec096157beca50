#include "day0/runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "day0/runtime/draft_model.h"

namespace day0 {
namespace {
ConstMatrix capture_view(const FloatMatrix& m) {
  return ConstMatrix(m.data.data(), m.rows, m.cols);
}

double elapsed_seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The file's bytes, or nothing when it does not exist.
std::optional<std::string> file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}
}  // namespace

const char* draft_source_name(DraftSource s) {
  switch (s) {
    case DraftSource::kNone:
      return "none";
    case DraftSource::kNgram:
      return "ngram";
    case DraftSource::kSelfInt4:
      return "self-int4";
    case DraftSource::kMtp:
      return "mtp";
  }
  return "?";
}

double SpecStats::acceptance_rate() const {
  return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
}

double SpecStats::mean_accepted_per_step() const {
  return verify_steps > 0 ? static_cast<double>(accepted) / static_cast<double>(verify_steps) : 0.0;
}

Result<std::vector<int32_t>> NgramDrafter::propose(std::span<const int32_t> history, int64_t k) {
  const auto n_history = static_cast<int64_t>(history.size());
  for (int64_t n = max_n_; n >= min_n_; --n) {
    if (n_history < n + 1) continue;
    const std::span<const int32_t> tail = history.subspan(static_cast<size_t>(n_history - n));
    // The latest earlier occurrence: the most recent context is the likeliest to repeat.
    for (int64_t start = n_history - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), history.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t to = std::min(from + k, n_history);
      return std::vector<int32_t>(history.begin() + from, history.begin() + to);
    }
  }
  return std::vector<int32_t>{};
}

ModelDrafter::ModelDrafter(Engine& draft) : draft_(draft), cache_(draft.new_cache()) {}

void ModelDrafter::cut_back(int64_t tokens) {
  fed_.resize(static_cast<size_t>(cut_back_draft_cache(draft_, cache_, tokens)));
}

Status ModelDrafter::start(std::span<const int32_t> prompt) {
  cut_back(0);
  const SequenceStep step{&cache_, prompt};
  D0_RETURN_IF_ERROR(draft_.forward(std::span(&step, 1), true).status());
  fed_.assign(prompt.begin(), prompt.end());
  return Status::ok();
}

Result<std::vector<int32_t>> ModelDrafter::propose(std::span<const int32_t> history, int64_t k) {
  std::vector<int32_t> drafts;
  if (k <= 0 || history.empty()) return drafts;
  // At least the history's last token is fed: its logits give the first draft.
  size_t common = 0;
  while (common < fed_.size() && common + 1 < history.size() && fed_[common] == history[common]) ++common;
  cut_back(static_cast<int64_t>(common));
  SamplingParams greedy;
  std::vector<int32_t> feed(history.begin() + static_cast<std::ptrdiff_t>(fed_.size()), history.end());
  for (int64_t i = 0; i < k; ++i) {
    const SequenceStep step{&cache_, feed};
    D0_ASSIGN_OR_RETURN(ConstMatrix logits, draft_.forward(std::span(&step, 1), true));  // [1, vocab]
    fed_.insert(fed_.end(), feed.begin(), feed.end());
    // The accepted history ends here: the next call most likely goes back to this point.
    if (i == 0 && cache_.recurrent_model()) cache_.checkpoint();
    drafts.push_back(pick_token(draft_.backend(), logits.row_span(0), greedy, 0));
    feed.assign(1, drafts.back());
  }
  return drafts;
}

Status check_draft_matches(const ModelSpec& target, const std::string& target_folder, const ModelSpec& draft,
                           const std::string& draft_folder) {
  if (target.vocab_size != draft.vocab_size) {
    return invalid_argument(
        fmt::format("the draft model {} has a vocabulary of {} tokens, the target {} has {}", draft_folder,
                    draft.vocab_size, target_folder, target.vocab_size));
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    const auto mine = file_bytes(std::filesystem::path(target_folder) / name);
    const auto theirs = file_bytes(std::filesystem::path(draft_folder) / name);
    if (mine.has_value() != theirs.has_value() || mine != theirs) {
      return invalid_argument(fmt::format(
          "the draft model {} does not share the target's tokenizer: {} {} ({} in the target {})",
          draft_folder, name, theirs ? "differs" : "is missing", mine ? "present" : "absent", target_folder));
    }
  }
  return Status::ok();
}

DraftVerdict accept_or_resample(std::span<const double> p, std::span<const double> q, int32_t x,
                                double u_accept, double u_resample) {
  const auto at = static_cast<size_t>(x);
  if (q[at] > 0 && u_accept * q[at] < p[at]) return {x, true};
  // The residual max(0, p - q): where the target wants more mass than the draft gave.
  double residual = 0;
  for (size_t i = 0; i < p.size(); ++i) residual += std::max(0.0, p[i] - q[i]);
  const double target = u_resample * residual;
  double cumulative = 0;
  int32_t last = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    const double mass = std::max(0.0, p[i] - q[i]);
    if (mass <= 0) continue;
    last = static_cast<int32_t>(i);
    cumulative += mass;
    if (target < cumulative) return {last, false};
  }
  return {last, false};  // rounding left the target at the very end
}

int64_t verify_drafts(Backend& backend, ConstMatrix logits, std::span<const int32_t> drafts,
                      SequenceSampler& sampler, const EmitStep& emit) {
  int64_t accepted = 0;
  const auto n_drafts = static_cast<int64_t>(drafts.size());
  for (int64_t row = 0; row < logits.rows; ++row) {
    // The target's own pick with plain decoding's seed stream: a one-hot draft is accepted exactly when
    // the pick equals it.
    const GenerationStep step = sampler.next(backend, logits.row_span(row));
    const bool agrees = row < n_drafts && step.chosen.token == drafts[static_cast<size_t>(row)];
    if (agrees) ++accepted;
    if (!emit(step) || !agrees) break;
  }
  return accepted;
}

Result<SpecGeneration> generate_speculative(Engine& engine, const GenerationRequest& request,
                                            Drafter& drafter, const SpecOptions& options) {
  if (options.tokens < 1 || options.tokens > kMaxSpecTokens) {
    return invalid_argument(
        fmt::format("speculative decoding: draft tokens per step must be in 1..{}, found {}", kMaxSpecTokens,
                    options.tokens));
  }
  if (request.cache != nullptr && request.cache->length() > 0) {
    return invalid_argument(
        "speculative decoding: the cache must start empty (drafters read the whole sequence)");
  }
  std::optional<KvCache> own;
  if (request.cache == nullptr) own.emplace(engine.new_cache());
  KvCache& cache = request.cache ? *request.cache : *own;
  D0_RETURN_IF_ERROR(validate_request(engine.spec(), request, 0));
  const int64_t context = engine.spec().max_position_embeddings;

  SpecGeneration out;
  GenerationResult& g = out.result;
  SpecStats& stats = out.stats;
  stats.position_drafted.assign(static_cast<size_t>(options.tokens), 0);
  stats.position_accepted.assign(static_cast<size_t>(options.tokens), 0);
  g.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  if (request.max_new <= 0) return out;
  g.steps.reserve(static_cast<size_t>(request.max_new));
  std::vector<int32_t> history(request.prompt.begin(), request.prompt.end());
  SequenceSampler sampler(request.sampling, request.top_logprobs);
  bool active = true;
  // Records a step picked with `cached` tokens in the cache (as plain decoding would have them) and
  // says whether the sequence goes on.
  auto record = [&](const GenerationStep& step, int64_t cached) {
    g.steps.push_back(step);
    history.push_back(step.chosen.token);
    const bool go_on = request.on_token ? request.on_token(step) : true;
    const char* finish = finish_reason_after(step.chosen.token, static_cast<int64_t>(g.steps.size()),
                                             request.max_new, request.stop_tokens, cached, context);
    if (!go_on) finish = "stop";
    if (finish == nullptr) return true;
    g.finish_reason = finish;
    active = false;
    return false;
  };

  // The target's hidden states for a drafter that reads them (ForwardCapture::last_hidden).
  ForwardCapture capture{.want_last_hidden = true};
  ForwardCapture* const hidden = drafter.reads_target_hidden() ? &capture : nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  {
    const SequenceStep prefill{&cache, request.prompt};
    D0_ASSIGN_OR_RETURN(ConstMatrix logits,
                        engine.forward(std::span(&prefill, 1), true, hidden));  // [1, vocab]
    if (hidden) drafter.observe_target(capture_view(capture.last_hidden), 0);
    record(sampler.next(engine.backend(), logits.row_span(0)), cache.length());
  }
  if (active) D0_RETURN_IF_ERROR(drafter.start(request.prompt));
  g.prefill_seconds = elapsed_seconds_since(t0);

  const auto t1 = std::chrono::steady_clock::now();
  // The prefill above ran on the fastest kernels, as plain decoding's does; the decode steps run as
  // one-token steps would, and the engine goes back to its setting on every return.
  struct RowInvariance {
    Engine& engine;
    bool before;
    ~RowInvariance() { engine.set_row_invariant(before); }
  } restore{engine, engine.row_invariant()};
  engine.set_row_invariant(options.row_invariant);
  std::vector<int32_t> feed;
  while (active) {
    const int64_t fed = cache.length();
    // Drafts never reach past the token budget or the context: every row verified could be emitted.
    int64_t k = std::min(options.tokens, request.max_new - static_cast<int64_t>(g.steps.size()) - 1);
    if (context > 0) k = std::min(k, context - 1 - fed);
    std::vector<int32_t> drafts;
    if (k > 0) {
      const auto td = std::chrono::steady_clock::now();
      D0_ASSIGN_OR_RETURN(drafts, drafter.propose(history, k));
      stats.draft_seconds += elapsed_seconds_since(td);
      if (static_cast<int64_t>(drafts.size()) > k) drafts.resize(static_cast<size_t>(k));
      for (int32_t id : drafts) {
        if (id < 0 || id >= engine.spec().vocab_size) {
          return invalid_argument(
              fmt::format("speculative decoding: the drafter proposed token id {}, outside the "
                          "target's vocabulary of {}",
                          id, engine.spec().vocab_size));
        }
      }
    }
    feed.assign(1, history.back());
    feed.insert(feed.end(), drafts.begin(), drafts.end());
    // A hybrid's recurrent state goes back only to a saved point: save the one before the drafts.
    const bool checkpointed = cache.recurrent_model() && !drafts.empty();
    if (checkpointed) cache.checkpoint();
    // Verification in steps of at most rows_per_forward rows; a step whose every row agreed goes on.
    const auto rows_per_forward =
        static_cast<size_t>(options.rows_per_forward > 0 ? options.rows_per_forward : kMaxSpecTokens + 1);
    int64_t emitted = 0, accepted = 0;
    for (size_t begin = 0; begin < feed.size(); begin += rows_per_forward) {
      const size_t end = std::min(feed.size(), begin + rows_per_forward);
      const SequenceStep verify{&cache, std::span<const int32_t>(feed).subspan(begin, end - begin)};
      D0_ASSIGN_OR_RETURN(ConstMatrix logits,
                          engine.forward(std::span(&verify, 1), false, hidden));  // [end - begin, vocab]
      if (hidden)
        drafter.observe_target(capture_view(capture.last_hidden), fed + static_cast<int64_t>(begin));
      // Row j checks draft begin + j + 1 (feed[0] is the last accepted token); the last row of the
      // last step has none: the bonus.
      const std::span<const int32_t> checked =
          std::span<const int32_t>(feed).subspan(begin + 1, std::min(end, feed.size() - 1) - begin);
      const int64_t agreed =
          verify_drafts(engine.backend(), logits, checked, sampler,
                        [&](const GenerationStep& step) { return record(step, fed + ++emitted); });
      accepted += agreed;
      if (!active || agreed < logits.rows) break;
    }
    ++stats.verify_steps;
    stats.drafted += static_cast<int64_t>(drafts.size());
    stats.accepted += accepted;
    for (size_t i = 0; i < drafts.size(); ++i) {
      ++stats.position_drafted[i];
      if (static_cast<int64_t>(i) < accepted) ++stats.position_accepted[i];
    }
    // Keep the positions whose tokens were emitted's inputs: the last token fed and the drafts before
    // the first emitted token that differed.
    const int64_t keep = fed + emitted;
    if (keep < cache.length()) {
      if (cache.can_truncate(keep)) {
        D0_RETURN_IF_ERROR(cache.truncate(keep));
      } else {
        // Back to the checkpoint, then the kept tokens fed again (their logits are known already).
        D0_RETURN_IF_ERROR(cache.truncate(fed).with_context("speculative decoding: back to the checkpoint"));
        const SequenceStep again{&cache, std::span<const int32_t>(feed).first(static_cast<size_t>(emitted))};
        D0_RETURN_IF_ERROR(engine.forward(std::span(&again, 1), true).status());
      }
    }
    if (checkpointed) cache.drop_checkpoint();
  }
  g.decode_seconds = elapsed_seconds_since(t1);
  return out;
}

}  // namespace day0
