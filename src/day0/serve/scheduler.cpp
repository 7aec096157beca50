#include "day0/serve/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "day0/runtime/mtp_drafter.h"
#include "day0/serve/dp_lockstep.h"
#include "day0/serve/prefix_cache.h"
#include "day0/serve/step_mirror.h"
#include "day0/serve/stop_matcher.h"
#include "day0/tokenizer/text_prompt.h"

namespace day0::serve {

using Clock = std::chrono::steady_clock;

const char* policy_name(AdmissionPolicy p) {
  return p == AdmissionPolicy::kGuaranteedNoEvict ? "guaranteed-no-evict" : "max-utilization";
}

void RequestStream::push(StreamEvent event) {
  std::function<void()> listener;
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
    listener = listener_;
  }
  ready_.notify_all();
  if (listener) listener();
}

void RequestStream::set_listener(std::function<void()> listener) {
  std::lock_guard lock(mutex_);
  listener_ = std::move(listener);
}

void RequestStream::wait(std::vector<StreamEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
}

struct Scheduler::Sequence {
  uint64_t id = 0;
  SequenceRequest request;
  std::shared_ptr<RequestStream> stream = std::make_shared<RequestStream>();
  std::vector<int32_t> tokens;  // prompt, then every generated token
  size_t prompt_len = 0;
  std::optional<KvCache> cache;  // null while waiting
  SequenceSampler sampler;
  std::unique_ptr<StreamingDecoder> decoder;
  StopMatcher stop;
  int64_t generated = 0;
  // Prompt log-probabilities (request.prompt_logprobs >= 0): prompt_steps[i] scores prompt token i,
  // filled chunk by chunk up to prompt_scored.
  std::vector<GenerationStep> prompt_steps;
  size_t prompt_scored = 1;
  int64_t worst_blocks = 0;  // blocks at prompt + max_new tokens (guaranteed-no-evict)
  bool counted = false;      // prompt tokens and prefix-cache lookups counted in the metrics
  bool planned = false;      // in the current step
  bool done = false;         // finished: its last event was sent
  // Speculative decoding: the n-gram or MTP drafter (the draft model's cache instead under self-int4), this
  // step's drafts before planning, its fed tokens (pending ones, then `drafts` drafts), whether the
  // cache went back to a checkpoint before accepted tokens (fed again, as decoding), and how often
  // its drafts were accepted lately (the draft-row cap's order).
  std::unique_ptr<Drafter> drafter;
  DraftCache draft_cache;
  std::vector<int32_t> proposed;
  std::vector<int32_t> feed;
  int64_t drafts = 0;
  bool rolled_back = false;
  AcceptanceEstimate acceptance;
  Clock::time_point arrival = Clock::now(), last_token{};

  explicit Sequence(SequenceRequest r)
      : request(std::move(r)),
        sampler(request.sampling, request.top_logprobs, request.logprobs),
        stop(request.stop_strings) {}
  int64_t fed() const { return cache ? cache->length() : 0; }
  bool scoring_prompt() const { return request.prompt_logprobs >= 0 && prompt_scored < prompt_len; }
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - fed(); }
  // Its next step decodes: one token after the first, or the accepted tokens a rollback feeds again.
  bool decoding() const { return generated > 0 && (pending() == 1 || rolled_back); }
};

struct Scheduler::PrefixState {
  PrefixState(int64_t block_tokens, int64_t max_state_blocks) : cache(block_tokens, 512, max_state_blocks) {}
  PrefixCache cache;
};

Scheduler::Scheduler(Engine& engine, const tokenizer::Tokenizer* tokenizer, SchedulerOptions options,
                     ServeMetrics& metrics, std::function<void()> after_step)
    : engine_(engine),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      after_step_(std::move(after_step)),
      context_(options.context > 0 ? options.context : engine.spec().max_position_embeddings),
      prefix_(std::make_unique<PrefixState>(engine.options().kv_block_tokens,
                                            std::max<int64_t>(options.max_seqs, 1))) {
  {
    // The layers whose K/V this rank's pool holds: not linear-attention layers (a fixed state), not
    // another pipeline stage's.
    const KvCache probe = engine_.new_cache();
    for (int64_t l = 0; l < probe.n_layers(); ++l) kv_layers_ += probe.paged(l) && probe.held(l) ? 1 : 0;
  }
  D0_CHECK_MSG(options_.kv_blocks > 0, "scheduler: the KV pool needs a capacity");
  // Under mpirun the followers replay every entry dropped (step_mirror.h).
  if (StepMirror* mirror = options_.mirror)
    prefix_->cache.on_drop([mirror](uint64_t entry) { mirror->prefix_drop(entry); });
  D0_CHECK_MSG(options_.max_seqs > 0 && options_.max_batch_tokens > 0, "scheduler: empty batch limits");
  D0_CHECK_MSG(options_.spec == DraftSource::kNone || options_.spec == DraftSource::kNgram ||
                   (options_.spec == DraftSource::kSelfInt4 && options_.draft != nullptr) ||
                   (options_.spec == DraftSource::kMtp && engine.mtp_layers() > 0),
               "scheduler: speculative decoding drafts by n-gram lookup, with a draft engine or MTP layers");
  D0_CHECK_MSG(!speculating() || (options_.spec_tokens >= 1 && options_.spec_tokens <= kMaxSpecTokens &&
                                  options_.mirror == nullptr && options_.lockstep == nullptr),
               "scheduler: speculative decoding needs 1..kMaxSpecTokens drafts and one process");
  if (speculating()) metrics_.enable_spec(options_.spec_tokens, options_.spec_max_rows);
  // Every block up front: the pool never grows past its capacity and a step never allocates slabs.
  engine_.kv_pool().reserve(options_.kv_blocks);
  if (options_.draft != nullptr && options_.spec == DraftSource::kSelfInt4) {
    draft_blocks_ = draft_pool_blocks(options_, engine_.spec());
    D0_CHECK_MSG(draft_blocks_ > 0, "scheduler: the draft KV pool needs a capacity");
    options_.draft->kv_pool().reserve(draft_blocks_);
  }
  publish_gauges();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  shutdown(std::chrono::milliseconds(0));
}

int64_t draft_pool_blocks(const SchedulerOptions& options, const ModelSpec& target) {
  if (options.draft == nullptr) return 0;
  if (options.draft_kv_blocks > 0) return options.draft_kv_blocks;
  const int64_t target_layers = std::max<int64_t>(count_kv_layers(target), 1);
  const int64_t draft_layers = std::max<int64_t>(count_kv_layers(options.draft->spec()), 1);
  return std::max<int64_t>(options.kv_blocks * draft_layers / target_layers, draft_layers);
}

int64_t Scheduler::blocks_for(int64_t tokens) const {
  const int64_t bt = engine_.options().kv_block_tokens;
  return kv_layers_ * ((tokens + bt - 1) / bt);
}

std::variant<std::shared_ptr<RequestStream>, ApiError> Scheduler::submit(SequenceRequest request) {
  const auto prompt_tokens = static_cast<int64_t>(request.prompt.size());
  if (blocks_for(prompt_tokens + 1) > options_.kv_blocks) {
    return bad_request(fmt::format("the prompt of {} tokens needs {} KV blocks, more than the pool's {}",
                                   prompt_tokens, blocks_for(prompt_tokens + 1), options_.kv_blocks),
                       "", "kv_cache_too_small");
  }
  auto s = std::make_unique<Sequence>(std::move(request));
  s->tokens = s->request.prompt;
  s->prompt_len = s->tokens.size();
  s->worst_blocks = blocks_for(std::min(prompt_tokens + s->request.max_new, context_) + 1);
  if (options_.policy == AdmissionPolicy::kGuaranteedNoEvict && s->worst_blocks > options_.kv_blocks) {
    return bad_request(
        fmt::format("prompt and max_tokens need {} KV blocks at worst, more than the pool's {} "
                    "(guaranteed-no-evict); ask for fewer tokens",
                    s->worst_blocks, options_.kv_blocks),
        "max_tokens", "kv_cache_too_small");
  }
  if (tokenizer_ != nullptr) s->decoder = std::make_unique<StreamingDecoder>(*tokenizer_);
  if (options_.spec == DraftSource::kNgram) s->drafter = std::make_unique<NgramDrafter>();
  std::shared_ptr<RequestStream> stream = s->stream;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      ApiError e{503, "the server is shutting down", "server_error", "", "shutting_down"};
      return e;
    }
    if (accepted_ >= options_.max_seqs + options_.max_waiting) {
      ApiError e{429,
                 fmt::format("too many concurrent requests ({} running or waiting, the limit)", accepted_),
                 "rate_limit_exceeded", "", "too_many_requests"};
      return e;
    }
    ++accepted_;
    s->id = next_id_++;
    incoming_.push_back(std::move(s));
  }
  wake_.notify_one();
  return stream;
}

void Scheduler::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      deadline_ = Clock::now() + grace;
    } else {
      deadline_ = std::min(deadline_, Clock::now() + grace);
    }
  }
  wake_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Scheduler::end_grace() {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) return;
    deadline_ = std::min(deadline_, Clock::now());
  }
  wake_.notify_one();
}

int64_t Scheduler::free_blocks() const {
  return options_.kv_blocks - engine_.kv_pool().stats().blocks_allocated;
}

// Frees blocks until `blocks` more than `planned_` are free: prefix-cache entries first, then
// (max-utilization) the newest running sequence that is newer than `for_seq` and not planned for this
// step. False when that is not enough.
bool Scheduler::make_room(int64_t blocks, const Sequence* for_seq) {
  while (free_blocks() - planned_ < blocks) {
    if (prefix_->cache.evict_one()) continue;
    if (options_.policy == AdmissionPolicy::kGuaranteedNoEvict) return false;
    Sequence* victim = nullptr;
    for (auto& r : running_) {
      if (r->cache && !r->planned && r->id > for_seq->id && (victim == nullptr || r->id > victim->id))
        victim = r.get();
    }
    if (victim == nullptr) return false;
    preempt(*victim);
  }
  return true;
}

void Scheduler::remember_prefix(const Sequence& s) {
  const int64_t length = s.cache->length();
  const std::optional<uint64_t> entry =
      prefix_->cache.insert(std::span(s.tokens).first(static_cast<size_t>(length)), *s.cache);
  if (entry && options_.mirror != nullptr) {
    const int64_t bt = engine_.options().kv_block_tokens;
    options_.mirror->prefix_insert(*entry, s.id, (length / bt) * bt);  // the entry keeps whole blocks
  }
}

void Scheduler::drop_cache(Sequence& s) {
  if (s.cache && options_.mirror != nullptr) options_.mirror->release(s.id);
  s.cache.reset();
  s.draft_cache.reset();
  if (options_.spec == DraftSource::kMtp) s.drafter.reset();  // its MTP cache with it
  s.rolled_back = false;                                      // recomputed from its tokens as a prefill
}

Result<ConstMatrix> Scheduler::forward(std::span<const SequenceStep> batch, std::span<const uint64_t> ids,
                                       bool last_only) {
  if (DpLockstep* lockstep = options_.lockstep; lockstep != nullptr) {
    if (Status st = lockstep->before_forward(); !st.is_ok()) lockstep->fail(st);
    auto logits = engine_.forward(batch, last_only);
    lockstep->after_forward();
    if (!logits.is_ok() && logits.status().code() == StatusCode::kIoError) lockstep->fail(logits.status());
    return logits;
  }
  StepMirror* mirror = options_.mirror;
  if (mirror == nullptr) return engine_.forward(batch, last_only, drafts_read_hidden() ? &capture_ : nullptr);
  // The followers are part of every collective of the step: a failure to reach them, or one inside
  // the step, leaves the job's communicators unusable, and the job must end (every rank, not a hang).
  if (Status st = mirror->send_step(ids, batch, last_only); !st.is_ok()) mirror->fail(st);
  const auto start = Clock::now();
  auto logits = engine_.forward(batch, last_only);
  mirror->add_forward_seconds(std::chrono::duration<double>(Clock::now() - start).count());
  if (!logits.is_ok() && logits.status().code() == StatusCode::kIoError) mirror->fail(logits.status());
  return logits;
}

// The prompt's steps, the first unscored (nothing comes before it): a one-token prompt has only it.
void Scheduler::start_prompt_steps(Sequence& s) {
  if (!s.prompt_steps.empty()) return;
  s.prompt_steps.resize(s.prompt_len);
  s.prompt_steps[0].chosen = {s.tokens[0], std::numeric_limits<double>::quiet_NaN()};
}

void Scheduler::score_prompt(Sequence& s, int64_t start, const ConstMatrix& rows, int64_t first_row,
                             int64_t n_rows) {
  const size_t prompt_len = s.prompt_len;
  start_prompt_steps(s);
  const auto top_n = static_cast<size_t>(s.request.prompt_logprobs);
  for (int64_t j = 0; j < n_rows; ++j) {
    // Row j follows the token at position start + j and rates the one after it.
    const auto next = static_cast<size_t>(start + j + 1);
    if (next >= prompt_len) break;
    if (next < s.prompt_scored) continue;  // scored before a preemption recomputed it
    const std::span<const float> row = rows.row_span(first_row + j);
    // log-softmax in double: row [vocab] -> logprob of the prompt's token, and the top_n best.
    const float mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
    const double lse = mx + std::log(sum);
    GenerationStep& step = s.prompt_steps[next];
    step.chosen = {s.tokens[next], static_cast<double>(row[static_cast<size_t>(s.tokens[next])]) - lse};
    if (top_n > 0) {
      std::vector<int32_t> order(row.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int32_t>(k);
      const size_t n = std::min(top_n, order.size());
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                        [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      step.top.clear();
      for (size_t k = 0; k < n; ++k) step.top.push_back({order[k], static_cast<double>(row[order[k]]) - lse});
    }
    s.prompt_scored = next + 1;
  }
}

void Scheduler::preempt(Sequence& s) {
  drop_cache(s);
  metrics_.count_preemption();
}

void Scheduler::finish(Sequence& s, const std::string& reason, std::optional<ApiError> error) {
  StreamEvent e;
  if (!error && reason != "abort") {
    // What the stop matcher and decoder still hold becomes final.
    std::string rest = s.decoder ? s.decoder->finish() : std::string();
    e.text = s.stop.push(rest);
    e.text += s.stop.finish();
  }
  e.finished = true;
  e.finish_reason = reason;
  e.prompt_tokens = static_cast<int64_t>(s.prompt_len);
  e.completion_tokens = s.generated;
  e.error = std::move(error);
  s.done = true;
  if (s.cache && !e.error && reason != "abort" && options_.prefix_caching) remember_prefix(s);
  drop_cache(s);
  metrics_.count_finished(e.error ? "abort" : reason);
  metrics_.observe_e2e(std::chrono::duration<double>(Clock::now() - s.arrival).count());
  {
    // Before the last event: a client that sends its next request as soon as it has this answer
    // must find the slot free.
    std::lock_guard lock(mutex_);
    --accepted_;
  }
  s.stream->push(std::move(e));
}

void Scheduler::emit_token(Sequence& s, GenerationStep step, int64_t cached) {
  const int32_t token = step.chosen.token;
  const auto now = Clock::now();
  if (s.generated == 0) {
    metrics_.observe_ttft(std::chrono::duration<double>(now - s.arrival).count());
  } else {
    metrics_.observe_itl(std::chrono::duration<double>(now - s.last_token).count());
  }
  s.last_token = now;
  ++s.generated;
  metrics_.add_generation_tokens(1);
  s.tokens.push_back(token);
  const std::span<const int32_t> stops = s.request.stop_tokens;
  const bool stop_token = std::find(stops.begin(), stops.end(), token) != stops.end();
  StreamEvent e;
  if (s.decoder && !stop_token) e.text = s.stop.push(s.decoder->push(token));
  e.steps.push_back(std::move(step));
  if (s.generated == 1 && s.request.prompt_logprobs >= 0) {
    start_prompt_steps(s);
    e.prompt_steps = std::move(s.prompt_steps);
  }
  const char* reason = finish_reason_after(token, s.generated, s.request.max_new, stops, cached, context_);
  if (s.stop.stopped()) reason = "stop";
  if (reason != nullptr) {
    s.stream->push(std::move(e));
    finish(s, reason);
    return;
  }
  s.stream->push(std::move(e));
}

void Scheduler::admit() {
  int64_t admitted_need = 0;  // blocks the prefills admitted in this call will take
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_seqs) {
    Sequence& s = *waiting_.front();
    if (options_.policy == AdmissionPolicy::kGuaranteedNoEvict) {
      int64_t committed = 0;
      for (const auto& r : running_) committed += r->worst_blocks;
      if (committed + s.worst_blocks > options_.kv_blocks) break;
      // Worst cases fit in the pool; what the prefix cache holds must leave them room.
      while (options_.kv_blocks - committed - s.worst_blocks < prefix_->cache.blocks_held() &&
             prefix_->cache.evict_one()) {
      }
    }
    int64_t hit = 0;
    // A prompt being scored is computed whole: a cached prefix has no logits.
    if (options_.prefix_caching && !s.scoring_prompt()) {
      uint64_t entry = 0;
      if (auto cached = prefix_->cache.lookup(s.tokens, &hit, &entry)) {
        s.cache.emplace(std::move(*cached));
        if (options_.mirror != nullptr) options_.mirror->prefix_fork(s.id, entry, hit);
      }
    }
    if (!s.cache) s.cache.emplace(engine_.new_cache());
    if (options_.policy == AdmissionPolicy::kMaxUtilization) {
      // The whole pending prefill must fit now (nobody is preempted for a newcomer).
      const int64_t need = s.cache->blocks_needed(s.pending());
      while (free_blocks() - admitted_need < need && prefix_->cache.evict_one()) {
      }
      if (free_blocks() - admitted_need < need) {
        drop_cache(s);
        break;
      }
      admitted_need += need;
    }
    if (!s.counted) {  // once, even when preempted and recomputed
      metrics_.add_prompt_tokens(static_cast<int64_t>(s.prompt_len));
      if (options_.prefix_caching) metrics_.add_prefix_cache(static_cast<int64_t>(s.prompt_len), hit);
      s.counted = true;
    }
    // A fresh MTP state with every fresh cache: its rows follow the target's from position 0.
    if (options_.spec == DraftSource::kMtp && !s.drafter) s.drafter = std::make_unique<MtpDrafter>(engine_);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

int64_t Scheduler::draft_room(const Sequence& s) const {
  // Every row verified could be emitted: drafts stop short of the token budget and the context.
  return std::min(
      {options_.spec_tokens, s.request.max_new - s.generated - 1, context_ - s.fed() - s.pending()});
}

void Scheduler::propose_drafts() {
  std::vector<Sequence*> decoding;
  std::vector<DraftClaim> claims;
  for (auto& r : running_) {
    Sequence& s = *r;
    s.proposed.clear();
    if (!s.cache || !s.decoding()) continue;
    const int64_t room = draft_room(s);
    DraftClaim claim{.rows = s.pending(), .wanted = 0, .acceptance = s.acceptance.value()};
    if (room > 0 && s.drafter && !drafts_read_hidden()) {
      // Lookup costs next to nothing: what it finds is what the cap weighs.
      if (auto found = s.drafter->propose(s.tokens, room); found.is_ok()) s.proposed = std::move(*found);
      if (static_cast<int64_t>(s.proposed.size()) > room) s.proposed.resize(static_cast<size_t>(room));
      claim.wanted = static_cast<int64_t>(s.proposed.size());
    } else if (room > 0 && (options_.draft != nullptr || s.drafter)) {
      claim.wanted = room;  // a draft model (or MTP layer) drafts only what the cap allots
    }
    decoding.push_back(&s);
    claims.push_back(claim);
  }
  if (decoding.empty()) return;
  // A prompt (or a preempted sequence) with tokens to feed: its chunk joins this step.
  const bool prefilling = std::any_of(running_.begin(), running_.end(), [](const auto& r) {
    return r->cache && !r->decoding() && r->pending() > 0;
  });
  const DraftAllotment allotted = allot_draft_rows(claims, options_.spec_max_rows, prefilling);
  metrics_.count_draft_cap(allotted.withheld);
  std::vector<DraftAsk> asks;
  std::vector<Sequence*> asking;  // asks[a]'s sequence
  std::vector<MtpAsk> mtp_asks;
  std::vector<Sequence*> mtp_asking;  // mtp_asks[a]'s sequence
  for (size_t i = 0; i < decoding.size(); ++i) {
    Sequence& s = *decoding[i];
    const auto n = static_cast<size_t>(allotted.drafts[i]);
    if (s.drafter && !drafts_read_hidden()) {
      s.proposed.resize(std::min(s.proposed.size(), n));
    } else if (n == 0) {
      continue;
    } else if (s.drafter) {
      mtp_asks.push_back({.drafter = static_cast<MtpDrafter*>(s.drafter.get()),
                          .history = s.tokens,
                          .k = allotted.drafts[i]});
      mtp_asking.push_back(&s);
    } else {
      asks.push_back({.state = &s.draft_cache, .history = s.tokens, .k = allotted.drafts[i]});
      asking.push_back(&s);
    }
  }
  // Every MTP-drafting sequence in one forward_mtp call per draft depth. A failed call leaves this step
  // without drafts, a sequence whose hidden states are missing goes without them.
  const int64_t mtp_calls = engine_.mtp_calls();
  if (!mtp_asks.empty() && mtp_propose_batch(engine_, mtp_asks).is_ok()) {
    for (size_t a = 0; a < mtp_asks.size(); ++a) {
      if (mtp_asks[a].status.is_ok()) mtp_asking[a]->proposed = std::move(mtp_asks[a].drafts);
    }
  }
  // A failed draft step leaves this step without drafts: plain decoding, the caches rebuilt next time.
  if (!asks.empty() && draft_greedy_batch(*options_.draft, asks, draft_blocks_).is_ok()) {
    int64_t pool_full = 0;
    for (size_t a = 0; a < asks.size(); ++a) {
      asking[a]->proposed = std::move(asks[a].drafts);
      pool_full += asks[a].pool_full ? 1 : 0;
    }
    metrics_.count_draft_pool_full(pool_full);
  }
  // A token outside the vocabulary would fail the whole step: drafts end before it.
  const int64_t vocab = engine_.spec().vocab_size;
  for (Sequence* s : decoding) {
    const auto bad =
        std::find_if(s->proposed.begin(), s->proposed.end(), [&](int32_t t) { return t < 0 || t >= vocab; });
    s->proposed.erase(bad, s->proposed.end());
  }
  if (options_.on_drafted) {
    DraftedStep step{.mtp_calls = engine_.mtp_calls() - mtp_calls};
    for (size_t i = 0; i < decoding.size(); ++i) {
      if (allotted.drafts[i] == 0) continue;
      step.sequences.push_back(decoding[i]->id);
      step.allotted.push_back(allotted.drafts[i]);
      step.drafts.push_back(decoding[i]->proposed);
    }
    options_.on_drafted(step);
  }
}

// One step; false when there was nothing to run.
bool Scheduler::run_step() {
  std::vector<Planned> plan;
  planned_ = 0;
  int64_t budget = options_.max_batch_tokens;
  // Oldest first: the newest are the ones preempted.
  std::sort(running_.begin(), running_.end(), [](const auto& a, const auto& b) { return a->id < b->id; });
  for (auto& r : running_) r->planned = false;
  if (speculating()) propose_drafts();
  // Decodes first (one token each, and their drafts), then prefill chunks in the room left.
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& r : running_) {
      Sequence& s = *r;
      if (!s.cache || s.planned) continue;  // preempted in this step, or planned
      const bool decode = s.decoding();
      if ((pass == 0) != decode || budget == 0) continue;
      const int64_t take = std::min(s.pending(), budget);
      std::vector<int32_t> drafts;
      if (decode && take == s.pending()) {
        drafts = std::move(s.proposed);
        if (static_cast<int64_t>(drafts.size()) > budget - take)
          drafts.resize(static_cast<size_t>(budget - take));
      }
      const auto n_drafts = static_cast<int64_t>(drafts.size());
      int64_t need = s.cache->blocks_needed(take + n_drafts);
      if (n_drafts > 0 && free_blocks() - planned_ < need) {
        // Drafts take only free blocks: nobody is evicted or preempted for a guess.
        drafts.clear();
        need = s.cache->blocks_needed(take);
      }
      if (!make_room(need, &s)) {
        if (pass == 1) continue;  // the prefill waits for blocks
        const bool alone = std::none_of(running_.begin(), running_.end(),
                                        [&](const auto& o) { return o.get() != &s && o->cache; });
        if (alone) {
          finish(s, "length");  // the whole pool cannot hold it: the pool is its context
        } else {
          preempt(s);
        }
        continue;
      }
      if (decode && speculating()) {
        const auto from = s.tokens.begin() + s.fed();
        s.feed.assign(from, from + take);
        s.feed.insert(s.feed.end(), drafts.begin(), drafts.end());
        s.drafts = static_cast<int64_t>(drafts.size());
        // A recurrent state goes back only to a saved point: the one before the drafts (after a
        // rollback, once the tokens fed again are in: refeed()).
        if (s.drafts > 0 && s.cache->recurrent_model() && !s.rolled_back) s.cache->checkpoint();
      }
      s.planned = true;
      planned_ += need;
      plan.push_back({&s, take + static_cast<int64_t>(drafts.size()), s.fed(), decode && speculating()});
      budget -= plan.back().take;
    }
  }
  // Finished ones leave; preempted ones go back to waiting, oldest first.
  for (auto it = running_.begin(); it != running_.end();) {
    Sequence& s = **it;
    if (s.cache) {
      ++it;
      continue;
    }
    if (!s.done) {
      auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) { return w->id > s.id; });
      waiting_.insert(at, std::move(*it));
    }
    it = running_.erase(it);
  }
  if (plan.empty()) return false;
  // Tokens fed again after a rollback go on the row-invariant kernels too: each row's state and logits
  // are then those of the one-token steps plain decoding took.
  const bool any_drafts = std::any_of(plan.begin(), plan.end(), [](const Planned& p) {
    return p.decoding && (p.seq->drafts > 0 || p.seq->rolled_back);
  });
  if (!any_drafts) {
    // Nothing to verify (no drafts found, or the cap withheld them): one call on the fast kernels, as
    // plain decoding runs the step.
    for (Planned& p : plan) {
      p.seq->feed.clear();
      p.seq->rolled_back = false;
    }
    engine_.set_row_invariant(false);
    execute(plan, false);
  } else {
    // Decoding rows on the row-invariant kernels (each row's logits those of a one-token step), then
    // prefill chunks on the fast ones, as `run` prefills: two forward calls when both are present.
    std::vector<Planned> decoding, prefilling;
    for (const Planned& p : plan) {
      (p.decoding ? decoding : prefilling).push_back(p);
    }
    if (!decoding.empty()) {
      engine_.set_row_invariant(true);
      refeed(decoding);
      execute(decoding, true);
    }
    if (!prefilling.empty()) {
      engine_.set_row_invariant(false);
      execute(prefilling, false);
    }
    for (const Planned& p : decoding) p.seq->feed.clear();
  }
  std::erase_if(running_, [](const auto& s) { return s->done; });
  if (after_step_) after_step_();
  return true;
}

void Scheduler::execute(std::vector<Planned>& group, bool verify) {
  std::vector<SequenceStep> batch;
  std::vector<uint64_t> ids;
  batch.reserve(group.size());
  for (const Planned& p : group) {
    Sequence& s = *p.seq;
    ids.push_back(s.id);
    batch.push_back({&*s.cache, verify ? std::span<const int32_t>(s.feed)
                                       : std::span<const int32_t>(s.tokens).subspan(
                                             static_cast<size_t>(s.fed()), static_cast<size_t>(p.take))});
  }
  // Picks the next token of a sequence whose known tokens are now all cached.
  auto pick = [&](Sequence& s, std::span<const float> row) {
    if (s.pending() != 0) return;  // a prefill chunk that is not the last
    if (s.generated == 0 && options_.prefix_caching) {
      // The prompt's whole blocks are written: a prompt arriving while this one still decodes can
      // share them (not only once it finishes).
      remember_prefix(s);
    }
    try {
      emit_token(s, s.sampler.next(engine_.backend(), row), s.cache->length());
    } catch (const std::exception& e) {
      if (!s.done) {
        finish(
            s, "abort",
            ApiError{500, fmt::format("internal error: {}", e.what()), "server_error", "", "internal_error"});
      }
    }
  };
  // A row per fed token when the group verifies drafts or a sequence scoring its prompt is in it
  // (echo with logprobs); else a row per sequence, its last.
  const bool all_rows = verify || std::any_of(group.begin(), group.end(),
                                              [](const Planned& p) { return p.seq->scoring_prompt(); });
  // Sequence b's rows of `rows` from first_row: verifies its drafts, or scores its prompt and picks
  // from its last.
  auto consume = [&](const Planned& p, const ConstMatrix& rows, int64_t first_row, bool per_token) {
    if (verify) return verify_rows(p, rows, first_row);
    if (p.decoding && p.seq->pending() == 0) {
      // A speculating sequence's step without drafts: a verification of none.
      metrics_.count_verification(0, 0);
      p.seq->acceptance.observe(0, 0);
      if (options_.on_verified)
        options_.on_verified({p.seq->id, p.start, p.take, 0, 0, 0, p.seq->cache->length()});
    }
    if (!per_token) return pick(*p.seq, rows.row_span(first_row));
    if (p.seq->scoring_prompt()) score_prompt(*p.seq, p.start, rows, first_row, p.take);
    pick(*p.seq, rows.row_span(first_row + p.take - 1));
  };
  auto logits = forward(batch, ids, !all_rows);
  if (logits.is_ok()) {
    observe_hidden(group, batch);
    int64_t row = 0;
    for (const Planned& p : group) {
      consume(p, *logits, row, all_rows);
      row += all_rows ? p.take : 1;
    }
    return;
  }
  // One sequence at a time: only those that fail alone fail (the engine rolled every cache back).
  for (size_t b = 0; b < group.size(); ++b) {
    Sequence& s = *group[b].seq;
    if (s.cache->state_lost()) {
      // The failed step advanced a recurrent state past the length it went back to: back to the last
      // snapshot (or 0), and this retry feeds the tokens from there (without drafts).
      const int64_t upto = s.fed() + group[b].take - (verify ? s.drafts : 0);
      if (s.cache->snapshot_tokens() < 0 || !s.cache->truncate(s.cache->snapshot_tokens()).is_ok())
        (void)s.cache->truncate(0);
      batch[b].tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.fed()),
                                                                   static_cast<size_t>(upto - s.fed()));
      if (verify) {
        if (s.cache->recurrent_model()) s.cache->drop_checkpoint();
        s.drafts = 0;
        s.feed.assign(batch[b].tokens.begin(), batch[b].tokens.end());
        batch[b].tokens = s.feed;
      }
    }
    const bool alone_rows = verify || s.scoring_prompt();
    auto alone = forward(std::span(&batch[b], 1), std::span(&ids[b], 1), !alone_rows);
    if (alone.is_ok()) {
      observe_hidden(std::span(&group[b], 1), std::span(&batch[b], 1));
      Planned retried = group[b];
      retried.take = static_cast<int64_t>(batch[b].tokens.size());
      retried.start = s.fed() - retried.take;
      consume(retried, *alone, 0, alone_rows);
    } else {
      if (verify && s.cache->recurrent_model()) s.cache->drop_checkpoint();
      finish(s, "abort",
             ApiError{500, fmt::format("internal error: {}", alone.status().to_string()), "server_error", "",
                      "internal_error"});
    }
  }
}

void Scheduler::refeed(std::vector<Planned>& group) {
  std::vector<SequenceStep> batch;
  std::vector<uint64_t> ids;
  std::vector<Planned*> refed;
  for (Planned& p : group) {
    Sequence& s = *p.seq;
    if (!s.rolled_back || s.drafts == 0) continue;
    // Its pending tokens but the last (the one picked after them, whose logits are not known yet).
    const int64_t n = p.take - s.drafts - 1;
    if (n <= 0) {
      s.cache->checkpoint();
      continue;
    }
    batch.push_back({&*s.cache, std::span<const int32_t>(s.feed).first(static_cast<size_t>(n))});
    ids.push_back(s.id);
    refed.push_back(&p);
  }
  if (batch.empty()) return;
  // No hidden states observed: the verification that rolled back handed the drafter these rows.
  const bool ok = forward(batch, ids, true).is_ok();
  for (size_t i = 0; i < refed.size(); ++i) {
    Planned& p = *refed[i];
    Sequence& s = *p.seq;
    const auto n = static_cast<int64_t>(batch[i].tokens.size());
    if (ok) {
      s.feed.erase(s.feed.begin(), s.feed.begin() + n);
      p.start += n;
      p.take -= n;
      p.refed = n;
      s.cache->checkpoint();
    } else {
      // The engine put the caches back: this step feeds the pending tokens without drafts (a lost
      // state fails the verification call, whose retry recomputes it).
      p.take -= s.drafts;
      s.feed.resize(static_cast<size_t>(p.take));
      s.drafts = 0;
    }
  }
}

void Scheduler::observe_hidden(std::span<const Planned> group, std::span<const SequenceStep> batch) {
  if (!drafts_read_hidden()) return;
  const FloatMatrix& h = capture_.last_hidden;
  const ConstMatrix hidden(h.data.data(), h.rows, h.cols);  // [tokens fed by the call, residual width]
  int64_t row = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    const auto n = static_cast<int64_t>(batch[i].tokens.size());
    // The call appended n rows to the cache: they start at its length before it.
    if (Drafter* d = group[i].seq->drafter.get())
      d->observe_target(hidden.row_slice(row, n), batch[i].cache->length() - n);
    row += n;
  }
}

void Scheduler::verify_rows(const Planned& p, const ConstMatrix& rows, int64_t first_row) {
  Sequence& s = *p.seq;
  const int64_t n_drafts = s.drafts;
  const int64_t pending = p.take - n_drafts;  // tokens of s.tokens fed (1, or more after a rollback)
  if (p.start + pending < static_cast<int64_t>(s.tokens.size())) return;  // a chunk that is not the last
  const std::span<const int32_t> drafts =
      std::span<const int32_t>(s.feed).subspan(static_cast<size_t>(pending));
  // Row pending - 1 follows the last known token; the rows after it follow each draft.
  std::vector<GenerationStep> picked;
  int64_t accepted = 0;
  try {
    accepted = verify_drafts(engine_.backend(), rows.row_slice(first_row + pending - 1, n_drafts + 1), drafts,
                             s.sampler, [&](const GenerationStep& step) {
                               picked.push_back(step);
                               return true;
                             });
  } catch (const std::exception& e) {
    if (s.cache->recurrent_model()) s.cache->drop_checkpoint();
    finish(s, "abort",
           ApiError{500, fmt::format("internal error: {}", e.what()), "server_error", "", "internal_error"});
    return;
  }
  metrics_.count_verification(n_drafts, accepted);
  s.acceptance.observe(n_drafts, accepted);
  // Keep the positions that are inputs of the picked tokens: the pending ones and the drafts accepted.
  const int64_t keep = p.start + pending + accepted;
  s.rolled_back = false;
  if (keep < s.cache->length()) {
    if (s.cache->can_truncate(keep)) {
      (void)s.cache->truncate(keep);
    } else if (s.cache->checkpoint_tokens() == p.start && s.cache->can_truncate(p.start)) {
      // Back to the checkpoint before this step: the accepted tokens are fed again in the next step,
      // as decoding rows (their logits are known; the rows rebuild the state).
      (void)s.cache->truncate(p.start);
      s.rolled_back = true;
    } else {
      (void)s.cache->truncate(0);  // recomputed from its tokens, as after a preemption
    }
  }
  if (s.cache->recurrent_model()) s.cache->drop_checkpoint();
  if (options_.on_verified)
    options_.on_verified(
        {s.id, p.start - p.refed, p.refed + pending, p.refed, n_drafts, accepted, s.cache->length()});
  for (size_t i = 0; i < picked.size() && !s.done; ++i) {
    try {
      // Plain decoding would hold the pending tokens and the drafts before this one.
      emit_token(s, std::move(picked[i]), p.start + pending + static_cast<int64_t>(i));
    } catch (const std::exception& e) {
      if (!s.done) {
        finish(
            s, "abort",
            ApiError{500, fmt::format("internal error: {}", e.what()), "server_error", "", "internal_error"});
      }
    }
  }
}

void Scheduler::publish_gauges() {
  const KvPoolStats st = engine_.kv_pool().stats();
  SchedulerGauges g;
  g.running = static_cast<int64_t>(running_.size());
  g.waiting = static_cast<int64_t>(waiting_.size());
  {
    std::lock_guard lock(mutex_);
    g.waiting += static_cast<int64_t>(incoming_.size());
  }
  g.kv_blocks_total = options_.kv_blocks;
  g.kv_blocks_used = st.blocks_allocated;
  g.kv_fragmentation = st.fragmentation();
  if (draft_blocks_ > 0) {
    g.draft_kv_blocks_total = draft_blocks_;
    g.draft_kv_blocks_used = options_.draft->kv_pool().stats().blocks_allocated;
  }
  const PrefixCache::BlockCounts cached = prefix_->cache.block_counts(engine_.kv_pool());
  g.prefix_cache_blocks = cached.distinct;
  g.prefix_cache_exclusive_blocks = cached.exclusive;
  g.recurrent_state_bytes = st.state_bytes_allocated;
  g.prefix_cache_state_bytes =
      static_cast<uint64_t>(cached.state_distinct) * engine_.kv_pool().state_block_bytes();
  g.prefix_caching = options_.prefix_caching;
  if (options_.mirror != nullptr) g.communication_idle_ratio = options_.mirror->idle_ratio();
  if (options_.lockstep != nullptr) g.communication_idle_ratio = options_.lockstep->idle_ratio();
  metrics_.set_gauges(g);
}

void Scheduler::loop() {
  for (;;) {
    bool stopping = false;
    bool past_deadline = false;
    {
      std::unique_lock lock(mutex_);
      if (incoming_.empty() && waiting_.empty() && running_.empty() && !stopping_) {
        // Under DP lockstep the other ranks' steps wait for this one's answer: a short nap.
        wake_.wait_for(lock, options_.lockstep != nullptr ? std::chrono::milliseconds(1)
                                                          : std::chrono::milliseconds(200));
      }
      for (auto& s : incoming_) waiting_.push_back(std::move(s));
      incoming_.clear();
      stopping = stopping_;
      past_deadline = stopping && Clock::now() >= deadline_;
    }
    // Cancelled by their clients, or by the shutdown deadline.
    auto drop = [&](auto& list) {
      for (auto& s : list) {
        if (past_deadline) {
          finish(*s, "abort",
                 ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"});
        } else if (s->stream->cancelled()) {
          finish(*s, "abort");
        } else {
          continue;
        }
        s.reset();
      }
      std::erase_if(list, [](const auto& s) { return s == nullptr; });
    };
    drop(waiting_);
    drop(running_);
    if (stopping && waiting_.empty() && running_.empty()) {
      bool nothing_left = false;
      {
        std::lock_guard lock(mutex_);
        nothing_left = incoming_.empty();
      }
      if (DpLockstep* lockstep = options_.lockstep; lockstep != nullptr && nothing_left) {
        // Leave only with every rank: until then, keep meeting their steps.
        auto all_leaving = lockstep->idle(true);
        if (!all_leaving.is_ok()) lockstep->fail(all_leaving.status());
        if (*all_leaving) break;
        continue;
      }
      if (nothing_left) break;
      continue;
    }
    admit();
    const bool ran = run_step();
    if (!ran && options_.mirror != nullptr) {
      if (Status st = options_.mirror->keepalive(); !st.is_ok()) options_.mirror->fail(st);
    }
    if (!ran && options_.lockstep != nullptr) {
      if (auto idle = options_.lockstep->idle(false); !idle.is_ok()) options_.lockstep->fail(idle.status());
    }
    std::erase_if(waiting_, [](const auto& s) { return s->done; });
    publish_gauges();
    if (!ran && !waiting_.empty() && running_.empty()) {
      // Nothing fits even alone: fail the oldest rather than wait forever.
      finish(*waiting_.front(), "abort",
             ApiError{500, "internal error: the request does not fit in the KV pool", "server_error", "",
                      "kv_cache_too_small"});
      waiting_.pop_front();
    }
  }
  prefix_->cache.clear();
  publish_gauges();
  if (options_.mirror != nullptr) {
    if (Status st = options_.mirror->close(); !st.is_ok()) options_.mirror->fail(st);
  }
}

}  // namespace day0::serve
