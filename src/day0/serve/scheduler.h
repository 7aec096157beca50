#pragma once
// The serving scheduler: one engine thread doing iteration-level (continuous) batching over the
// engine's paged KV pool. Each step feeds one token of every decoding sequence plus chunks of pending
// prefills, all under a token budget (chunked prefill: a long prompt does not stall the others'
// inter-token latency), then picks the next token of every sequence whose known tokens are all in its
// cache through the library's SequenceSampler (the same sampling as `run`).
//  - Admission reserves KV blocks under a named policy (TensorRT-LLM's): guaranteed-no-evict admits a
//    sequence only when the worst case of every admitted sequence (prompt + max tokens) fits in the
//    pool, so nothing is ever preempted; max-utilization admits while the prompt fits now and, when a
//    step runs out of blocks, preempts the newest sequence (frees its blocks and recurrent state; it is
//    recomputed from its prompt and what it already generated when blocks come back, or resumed from a
//    prefix-cache entry of its tokens).
//  - Prefix caching (PrefixCache): prompts start from cached whole blocks when they can. Hybrid models
//    (Gated DeltaNet, Mamba-2) too: an entry carries the recurrent state at its end (the snapshot the
//    engine takes at the last whole block a step passes), and the entries' state blocks are capped at
//    max_seqs (one running sequence's state each).
//  - Speculative decoding (SchedulerOptions::spec, runtime/speculative.h): every decoding sequence may
//    add up to k drafts after its last token in the same step (n-gram lookup; the INT4 draft model, run
//    for all sequences at once, one draft-engine call per draft position: runtime/draft_model.h; or the
//    checkpoint's MTP layer, a cache of its own per sequence fed with the target's hidden states of the
//    rows each step keeps, every drafting sequence in one row-invariant forward_mtp call per draft depth
//    (mtp_propose_batch: a sequence's drafts are the ones it drafts alone): runtime/mtp_drafter.h, no
//    drafts for a sequence that started from a prefix-cache hit; the budget counts drafts; they never take
//    blocks a sequence or a prefill would need), and the rows of every decoding sequence are verified
//    at once with `run`'s rule (verify_drafts): greedy output is plain decoding's, sampling draws from
//    the same distribution. Rejected positions go back (KV pages; a hybrid's recurrent state to a
//    checkpoint taken before the drafts, its accepted tokens fed again in the next step). Decoding rows
//    run on the engine's row-invariant kernels in a forward call of their own, prefill chunks on the
//    fast ones in another: a sequence's tokens never depend on its batch neighbours. The draft-row cap
//    (serve/draft_rows.h) decides how many drafts a step verifies; a step left without drafts runs as
//    plain decoding does (one call on the fast kernels).
//  - A request cancelled by its client (disconnect) is dropped and its blocks freed at the next step.
//  - A step that fails is retried one sequence at a time, so a failure fails only the requests whose
//    sequence fails alone (500); the others go on. A recurrent state the failed step left ahead of its
//    length goes back to its snapshot (or to 0) and the retry feeds the tokens from there.
// Thread safety: submit(), cancel (RequestStream), shutdown() and the metrics may be called from any
// thread; the engine, its pool and the tokenizer are used only by the engine thread (the tokenizer
// only through const decode).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "day0/runtime/draft_model.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/speculative.h"
#include "day0/serve/api_request.h"
#include "day0/serve/draft_rows.h"
#include "day0/serve/metrics.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::serve {

enum class AdmissionPolicy { kMaxUtilization, kGuaranteedNoEvict };
class StepMirror;
class DpLockstep;

const char* policy_name(AdmissionPolicy policy);  // "max-utilization", "guaranteed-no-evict"

// One speculating sequence's step as verified (SchedulerOptions::on_verified).
struct VerifiedStep {
  uint64_t sequence = 0;  // the scheduler's id for it
  int64_t start = 0;      // its cache length before the step
  int64_t known = 0;      // its own tokens fed: 1, or more after a rollback
  int64_t refed = 0;      // of those, the ones fed first in a call of their own, before the checkpoint
  int64_t drafts = 0;     // drafts fed after them
  int64_t accepted = 0;
  int64_t length = 0;  // its cache length after: start + refed when it went back to the checkpoint
};

// A speculating step's drafting (SchedulerOptions::on_drafted): every decoding sequence the draft-row cap
// allotted drafts, in admission order, with its allotment and the drafts it got (fewer, or none, when the
// source found fewer), and the forward_mtp calls the drafting ran (--spec mtp: one per draft depth).
struct DraftedStep {
  std::vector<uint64_t> sequences;           // the scheduler's ids
  std::vector<int64_t> allotted;             // >= 1
  std::vector<std::vector<int32_t>> drafts;  // [sequences][<= allotted]
  int64_t mtp_calls = 0;                     // Engine::mtp_calls() of the step's drafting
};

struct SchedulerOptions {
  int64_t max_seqs = 256;           // sequences in the running batch at once
  int64_t max_waiting = 256;        // accepted requests waiting beyond those; more are refused (429)
  int64_t max_batch_tokens = 2048;  // tokens one step feeds (decode tokens + prefill chunks)
  int64_t kv_blocks = 0;            // pool capacity in blocks (> 0)
  AdmissionPolicy policy = AdmissionPolicy::kMaxUtilization;
  bool prefix_caching = true;
  int64_t context = 0;  // tokens a sequence may hold (<= the model's max_position_embeddings)
  // Serving under mpirun (rank 0): every step is sent to the other ranks first (serve/step_mirror.h).
  // Not owned; outlives the scheduler. Prefix cache entries made, forked and dropped are sent too.
  StepMirror* mirror = nullptr;
  // Attention data parallelism (every EP rank serves its own requests): each forward, and each loop
  // turn without one, meets the other ranks' first (serve/dp_lockstep.h). Not owned.
  DpLockstep* lockstep = nullptr;
  // Speculative decoding: where drafts come from (kNone: one token a step; kNgram; kSelfInt4 with
  // `draft`; kMtp from the engine's MTP layers, EngineOptions::mtp_layers) and k, the drafts a sequence may
  // add to a step (1..kMaxSpecTokens). Not with mirror or lockstep.
  DraftSource spec = DraftSource::kNone;
  int64_t spec_tokens = 4;
  // The draft-row cap: rows (decoding rows and drafts) a step's verification may hold; 0: no cap
  // (serve/draft_rows.h).
  int64_t spec_max_rows = kDefaultSpecMaxRows;
  // kSelfInt4: the draft model's engine (not owned, outlives the scheduler); every sequence's draft
  // cache lives on its pool, reserved up front and bounded at draft_pool_blocks(): a sequence the pool
  // has no room for gets no drafts that step (its draft cache dropped, rebuilt later), never a failure.
  Engine* draft = nullptr;
  // The draft pool's capacity in blocks; 0: the rule of draft_pool_blocks().
  int64_t draft_kv_blocks = 0;
  // Called on the engine thread after each verification (of drafts, or of none) of a speculating
  // sequence's step: what tests and tracing see of the rows it fed.
  std::function<void(const VerifiedStep&)> on_verified;
  // Called on the engine thread after a speculating step's drafts are proposed, before it is planned.
  std::function<void(const DraftedStep&)> on_drafted;
};

// The draft pool's capacity under `options` (kSelfInt4): draft_kv_blocks when set, else the blocks
// that hold the same tokens as the target's pool (kv_blocks scaled by the two models' KV layers), so
// that every sequence the target pool can hold can draft too; the draft's KV memory then equals the
// target's when their KV dtypes agree, and is reported beside it. 0 without a draft engine.
int64_t draft_pool_blocks(const SchedulerOptions& options, const ModelSpec& target);

struct SequenceRequest {
  std::vector<int32_t> prompt;
  int64_t max_new = 16;
  SamplingParams sampling;
  bool logprobs = true;  // false: the client did not ask for log-probabilities (not computed)
  int64_t top_logprobs = 0;
  std::vector<int32_t> stop_tokens;  // recorded and counted, never decoded into the text
  std::vector<std::string> stop_strings;
  // >= 0: the log-probability of every prompt token after the ones before it, with this many
  // alternatives (echo with logprobs). The prompt is then computed whole (no prefix-cache hit) and the
  // steps that feed it compute the LM head over all their rows.
  int64_t prompt_logprobs = -1;
};

// What the engine thread hands a request's HTTP thread, in order.
struct StreamEvent {
  std::string text;                   // text that became final with these tokens
  std::vector<GenerationStep> steps;  // the tokens generated (for logprobs)
  // With the first token, under prompt_logprobs >= 0: one per prompt token, the first with a NaN
  // log-probability (nothing comes before it).
  std::vector<GenerationStep> prompt_steps;
  bool finished = false;
  std::string finish_reason;  // stop / length / abort
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::optional<ApiError> error;  // the request failed (500) or the server stopped it (503)
};

class RequestStream {
 public:
  // Moves the pending events into `out`, waiting up to `timeout` while there are none.
  void wait(std::vector<StreamEvent>& out, std::chrono::milliseconds timeout);
  // Moves the pending events into `out` without waiting.
  void take(std::vector<StreamEvent>& out) { wait(out, std::chrono::milliseconds(0)); }
  // Called (on the engine thread) after each new event: how an event-driven server learns of it.
  void set_listener(std::function<void()> listener);
  // The client is gone: the engine thread drops the sequence at its next step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class Scheduler;
  void push(StreamEvent event);
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  std::function<void()> listener_;
  std::atomic<bool> cancelled_ = false;
};

class Scheduler {
 public:
  // `engine` and `tokenizer` (may be null: no text, only tokens) must outlive the scheduler. Reserves
  // the pool's blocks and starts the engine thread.
  // `after_step` runs on the engine thread after every step (the server flushes operator times).
  Scheduler(Engine& engine, const tokenizer::Tokenizer* tokenizer, SchedulerOptions options,
            ServeMetrics& metrics, std::function<void()> after_step = nullptr);
  ~Scheduler();  // shutdown(0) and join
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. ApiError 429 when max_seqs + max_waiting are taken, 503 once shutting down,
  // 400 when the prompt alone needs more KV blocks than the pool has.
  std::variant<std::shared_ptr<RequestStream>, ApiError> submit(SequenceRequest request);
  // Stops admitting; running and waiting requests go on for up to `grace`, then the rest are cancelled
  // (503); returns when the engine thread is done.
  void shutdown(std::chrono::milliseconds grace);
  // During a shutdown: ends the grace period now (a second SIGINT); the running requests are cancelled
  // at the next step. Safe beside a shutdown() in progress on another thread.
  void end_grace();
  bool shutting_down() const { return stopping_; }

  const SchedulerOptions& options() const { return options_; }
  // KV blocks needed by a sequence of `tokens` tokens (every layer).
  int64_t blocks_for(int64_t tokens) const;

 private:
  struct Sequence;
  // A sequence's part of the step being planned: `take` tokens fed from position `start` (for a
  // speculating sequence: its pending tokens, then its drafts).
  struct Planned {
    Sequence* seq;
    int64_t take;
    int64_t start = 0;
    bool decoding = false;  // a decoding sequence under speculation: fed s.feed, its rows verified
    int64_t refed = 0;      // tokens refeed() fed before `start` in this step
  };
  bool speculating() const { return options_.spec != DraftSource::kNone; }
  void loop();
  void admit();
  bool run_step();
  void finish(Sequence& s, const std::string& reason, std::optional<ApiError> error = std::nullopt);
  void preempt(Sequence& s);
  int64_t free_blocks() const;
  bool make_room(int64_t blocks, const Sequence* for_seq);
  // Sends a token picked with `cached` tokens in the sequence's cache (as plain decoding has them).
  void emit_token(Sequence& s, GenerationStep step, int64_t cached);
  // The drafts a decoding sequence may add: k, fewer near its token budget or the context.
  int64_t draft_room(const Sequence& s) const;
  // Every decoding sequence's drafts of this step (Sequence::proposed), under the draft-row cap.
  void propose_drafts();
  // After a rollback, a sequence with drafts first feeds the tokens it keeps (the pending ones but the
  // last, their logits known) in a call of their own, and checkpoints after them, as `run` does: a
  // rejection then goes back no further. With drafts beside them the checkpoint stayed before them,
  // and each rejection fed them again one token longer. The group's entries start after them.
  void refeed(std::vector<Planned>& group);
  // One forward call over `group` and every sequence's picks; a failed call is retried one sequence
  // at a time. `verify`: the group of decoding sequences under speculation (a row per fed token).
  void execute(std::vector<Planned>& group, bool verify);
  // A speculating sequence's rows [first_row, first_row + p.take): its drafts verified, the rejected
  // positions rolled back, the picked tokens sent.
  void verify_rows(const Planned& p, const ConstMatrix& rows, int64_t first_row);
  void publish_gauges();
  // engine_.forward, sent to the followers first when steps are mirrored (ids[i]: batch[i]'s sequence).
  // last_only = false: a row per fed token (a sequence scoring its prompt is in the step). Under
  // --spec mtp the step's last hidden states go to each sequence's drafter (observe_hidden).
  Result<ConstMatrix> forward(std::span<const SequenceStep> batch, std::span<const uint64_t> ids,
                              bool last_only);
  // Hands group[i]'s sequence its rows (batch[i]'s tokens) of the last forward call's hidden states
  // (MtpDrafter::observe_target), right after the call: before any rejected rows go back.
  void observe_hidden(std::span<const Planned> group, std::span<const SequenceStep> batch);
  bool drafts_read_hidden() const { return options_.spec == DraftSource::kMtp; }
  // Records the prompt log-probabilities that `rows` (one per token fed from position `start`) give.
  void score_prompt(Sequence& s, int64_t start, const ConstMatrix& rows, int64_t first_row, int64_t n_rows);
  // The prompt's steps: its first token's, unscored, then room for the rest.
  static void start_prompt_steps(Sequence& s);
  // Puts the whole blocks of `s`'s cache in the prefix cache (followers make the same entry).
  void remember_prefix(const Sequence& s);
  // The sequence's cache is gone (finished, preempted, not admitted): followers free theirs too.
  void drop_cache(Sequence& s);

  Engine& engine_;
  const tokenizer::Tokenizer* tokenizer_;
  SchedulerOptions options_;
  ServeMetrics& metrics_;
  std::function<void()> after_step_;
  int64_t context_;
  int64_t kv_layers_ = 0;     // layers that take blocks of this rank's pool
  int64_t planned_ = 0;       // blocks the sequences planned for this step will take
  int64_t draft_blocks_ = 0;  // the draft pool's capacity (draft_pool_blocks), 0 without a draft engine

  std::mutex mutex_;  // guards incoming_, accepted_, stopping_ transitions
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Sequence>> incoming_;
  int64_t accepted_ = 0;  // submitted and not finished
  std::atomic<bool> stopping_ = false;
  std::chrono::steady_clock::time_point deadline_{};
  uint64_t next_id_ = 0;

  // Engine thread only.
  std::deque<std::unique_ptr<Sequence>> waiting_;   // oldest first (preempted ones keep their place)
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  struct PrefixState;
  std::unique_ptr<PrefixState> prefix_;
  ForwardCapture capture_{.want_last_hidden = true};  // under --spec mtp: the last forward call's
  std::thread thread_;
};

}  // namespace day0::serve
