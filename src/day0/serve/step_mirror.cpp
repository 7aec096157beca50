#include "day0/serve/step_mirror.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace day0::serve {
namespace {

// One message is two sends on this tag: its word count, then the words.
constexpr int kStepTag = 7301;
// Words: kind, last_only, n_ops, n_sequences, n_tokens, then (kind, sequence, entry, tokens) per op,
// (id, cached, feeds) per sequence, the tokens.
constexpr size_t kHeaderWords = 5;
constexpr size_t kOpWords = 4;
constexpr size_t kSequenceWords = 3;
// A follower refuses a message beyond this (a broken sender must not make it allocate without bound).
constexpr int64_t kMaxWords = int64_t{1} << 28;

double wait_seconds(const std::vector<dist::Communicator*>& groups) {
  double s = 0;
  for (const dist::Communicator* g : groups) s += g->stats().wait_seconds;
  return s;
}

bool known_op(int64_t kind) {
  return kind >= static_cast<int64_t>(CacheOpKind::kRelease) &&
         kind <= static_cast<int64_t>(CacheOpKind::kPrefixDrop);
}

// A fork of `from` cut back to `tokens`.
Result<KvCache> fork_to(const KvCache& from, int64_t tokens) {
  if (tokens > from.length()) {
    return internal_error(fmt::format("holds {} tokens, rank 0 shares {}", from.length(), tokens));
  }
  KvCache copy = from.fork();
  D0_RETURN_IF_ERROR(copy.truncate(tokens));
  return copy;
}

// `to_id` of `to` := a fork of `from_id` of `from` cut back to `tokens`; the first must exist here, the
// second not yet.
Status fork_into(const std::map<int64_t, KvCache>& from, int64_t from_id, const char* from_name,
                 std::map<int64_t, KvCache>& to, int64_t to_id, const char* to_name, int64_t tokens) {
  const std::string what = fmt::format("step mirror: {} {} from {} {}", to_name, to_id, from_name, from_id);
  const auto source = from.find(from_id);
  if (source == from.end()) return internal_error(fmt::format("{}: no such {} here", what, from_name));
  if (to.contains(to_id)) return internal_error(fmt::format("{}: the {} exists", what, to_name));
  auto copy = fork_to(source->second, tokens);
  if (!copy.is_ok()) return copy.status().with_context(what);
  to.emplace(to_id, std::move(*copy));
  return Status::ok();
}

}  // namespace

std::vector<int64_t> encode_step_message(const StepMessage& m) {
  std::vector<int64_t> words;
  words.reserve(kHeaderWords + kOpWords * m.ops.size() + kSequenceWords * m.sequences.size() +
                m.tokens.size());
  words.insert(words.end(),
               {static_cast<int64_t>(m.kind), m.last_only ? 1 : 0, static_cast<int64_t>(m.ops.size()),
                static_cast<int64_t>(m.sequences.size()), static_cast<int64_t>(m.tokens.size())});
  for (const CacheOp& op : m.ops)
    words.insert(words.end(), {static_cast<int64_t>(op.kind), op.sequence, op.entry, op.tokens});
  for (const StepMessage::Sequence& q : m.sequences) words.insert(words.end(), {q.id, q.cached, q.feeds});
  words.insert(words.end(), m.tokens.begin(), m.tokens.end());
  return words;
}

Result<StepMessage> decode_step_message(std::span<const int64_t> words) {
  auto bad = [](const std::string& what) {
    return internal_error("step mirror: a message from rank 0 " + what);
  };
  if (words.size() < kHeaderWords) return bad(fmt::format("of {} words", words.size()));
  const int64_t kind = words[0], last_only = words[1], n_ops = words[2], n_sequences = words[3],
                n_tokens = words[4];
  const auto n = static_cast<int64_t>(words.size());
  if (kind < static_cast<int64_t>(StepMessageKind::kStep) ||
      kind > static_cast<int64_t>(StepMessageKind::kClose))
    return bad(fmt::format("of kind {}", kind));
  if (last_only != 0 && last_only != 1) return bad(fmt::format("with last_only {}", last_only));
  // Each count alone within the message first, so that the sum cannot overflow.
  if (n_ops < 0 || n_sequences < 0 || n_tokens < 0 || n_ops > n || n_sequences > n || n_tokens > n ||
      static_cast<int64_t>(kHeaderWords + kOpWords * static_cast<size_t>(n_ops) +
                           kSequenceWords * static_cast<size_t>(n_sequences)) +
              n_tokens !=
          n) {
    return bad(fmt::format("of {} words has {} operations, {} sequences and {} tokens", n, n_ops, n_sequences,
                           n_tokens));
  }
  StepMessage m;
  m.kind = static_cast<StepMessageKind>(kind);
  m.last_only = last_only == 1;
  if (m.kind != StepMessageKind::kStep && (n_sequences != 0 || n_tokens != 0))
    return bad(fmt::format("of kind {} carries a step", kind));
  size_t at = kHeaderWords;
  for (int64_t i = 0; i < n_ops; ++i, at += kOpWords) {
    const CacheOp op{static_cast<CacheOpKind>(words[at]), words[at + 1], words[at + 2], words[at + 3]};
    if (!known_op(words[at]) || op.sequence < 0 || op.entry < 0 || op.tokens < 0) {
      return bad(fmt::format("has operation {} (kind {}, sequence {}, entry {}, tokens {})", i, words[at],
                             op.sequence, op.entry, op.tokens));
    }
    m.ops.push_back(op);
  }
  int64_t fed = 0;
  for (int64_t i = 0; i < n_sequences; ++i, at += kSequenceWords) {
    const StepMessage::Sequence q{words[at], words[at + 1], words[at + 2]};
    if (q.id < 0 || q.cached < 0 || q.feeds < 0 || q.feeds > n_tokens - fed) {
      return bad(fmt::format("has sequence {} feed {} tokens from {} ({} left in the message)", q.id, q.feeds,
                             q.cached, n_tokens - fed));
    }
    fed += q.feeds;
    m.sequences.push_back(q);
  }
  if (fed != n_tokens) return bad(fmt::format("feeds {} of its {} tokens", fed, n_tokens));
  m.tokens.reserve(static_cast<size_t>(n_tokens));
  for (; at < words.size(); ++at) {
    if (words[at] < 0 || words[at] > std::numeric_limits<int32_t>::max())
      return bad(fmt::format("has token id {}", words[at]));
    m.tokens.push_back(static_cast<int32_t>(words[at]));
  }
  return m;
}

Status FollowerCaches::apply(const CacheOp& op) {
  switch (op.kind) {
    case CacheOpKind::kRelease:
      // A sequence rank 0 admitted and let go of before any step of it has no cache here.
      sequences_.erase(op.sequence);
      return Status::ok();
    case CacheOpKind::kPrefixInsert:
      return fork_into(sequences_, op.sequence, "sequence", entries_, op.entry, "prefix entry", op.tokens);
    case CacheOpKind::kPrefixFork:
      return fork_into(entries_, op.entry, "prefix entry", sequences_, op.sequence, "sequence", op.tokens);
    case CacheOpKind::kPrefixDrop:
      if (entries_.erase(op.entry) == 0)
        return internal_error(
            fmt::format("step mirror: prefix entry {} dropped: no such entry here", op.entry));
      return Status::ok();
  }
  return internal_error(fmt::format("step mirror: cache operation {}", static_cast<int64_t>(op.kind)));
}

Result<KvCache*> FollowerCaches::for_step(int64_t id, int64_t cached) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) it = sequences_.emplace(id, new_cache_()).first;
  KvCache& cache = it->second;
  if (cache.length() < cached) {
    return internal_error(fmt::format("step mirror: sequence {} holds {} tokens here, rank 0 has {}", id,
                                      cache.length(), cached));
  }
  if (cache.length() > cached) {
    // A windowed layer gave back what the shorter sequence needs: start it again (rank 0 did the same;
    // it then sends the sequence from 0).
    D0_RETURN_IF_ERROR(cache.truncate(cached).with_context(fmt::format("step mirror: sequence {}", id)));
  }
  return &cache;
}

StepMirror::StepMirror(dist::Communicator& world, std::vector<dist::Communicator*> compute_groups,
                       double keepalive_seconds)
    : world_(world),
      groups_(std::move(compute_groups)),
      keepalive_(keepalive_seconds),
      last_sent_(std::chrono::steady_clock::now()) {}

Status StepMirror::send(StepMessage& message) {
  message.ops = std::move(ops_);
  ops_.clear();
  const std::vector<int64_t> words = encode_step_message(message);
  const auto n = static_cast<int64_t>(words.size());
  for (int peer = 1; peer < world_.size(); ++peer) {
    D0_RETURN_IF_ERROR(world_.send(std::as_bytes(std::span(&n, 1)), peer, kStepTag));
    D0_RETURN_IF_ERROR(world_.send(std::as_bytes(std::span<const int64_t>(words)), peer, kStepTag));
  }
  last_sent_ = std::chrono::steady_clock::now();
  return Status::ok();
}

Status StepMirror::send_step(std::span<const uint64_t> ids, std::span<const SequenceStep> batch,
                             bool last_only) {
  D0_CHECK_MSG(ids.size() == batch.size(), "step mirror: one id per sequence of the step");
  if (closed_) return failed_precondition("step mirror: the followers were already sent away");
  StepMessage m;
  m.kind = StepMessageKind::kStep;
  m.last_only = last_only;
  for (size_t i = 0; i < batch.size(); ++i) {
    m.sequences.push_back({static_cast<int64_t>(ids[i]), batch[i].cache->length(),
                           static_cast<int64_t>(batch[i].tokens.size())});
    m.tokens.insert(m.tokens.end(), batch[i].tokens.begin(), batch[i].tokens.end());
  }
  return send(m);
}

void StepMirror::release(uint64_t id) {
  ops_.push_back({CacheOpKind::kRelease, static_cast<int64_t>(id), 0, 0});
}

void StepMirror::prefix_insert(uint64_t entry, uint64_t id, int64_t tokens) {
  ops_.push_back({CacheOpKind::kPrefixInsert, static_cast<int64_t>(id), static_cast<int64_t>(entry), tokens});
}

void StepMirror::prefix_fork(uint64_t id, uint64_t entry, int64_t tokens) {
  ops_.push_back({CacheOpKind::kPrefixFork, static_cast<int64_t>(id), static_cast<int64_t>(entry), tokens});
}

void StepMirror::prefix_drop(uint64_t entry) {
  ops_.push_back({CacheOpKind::kPrefixDrop, 0, static_cast<int64_t>(entry), 0});
}

Status StepMirror::keepalive() {
  if (closed_) return Status::ok();
  // The followers' heartbeats arrive ten times a second while they wait: drained here, not queued.
  world_.poll();
  if (std::chrono::steady_clock::now() - last_sent_ < keepalive_) return Status::ok();
  StepMessage m;
  m.kind = StepMessageKind::kKeepAlive;
  return send(m);
}

Status StepMirror::close() {
  if (closed_) return Status::ok();
  closed_ = true;
  StepMessage m;
  m.kind = StepMessageKind::kClose;
  return send(m);
}

void StepMirror::fail(const Status& st) {
  std::fprintf(stderr, "serve (rank 0): error: %s; ending every rank\n", st.to_string().c_str());
  std::fflush(stderr);
  dist::abort_world(1);
}

double StepMirror::idle_ratio() const {
  if (forward_seconds_ <= 0) return 0.0;
  return std::clamp(wait_seconds(groups_) / forward_seconds_, 0.0, 1.0);
}

Status follow_steps(Engine& engine, dist::Communicator& world, int64_t kv_blocks) {
  engine.kv_pool().reserve(kv_blocks);
  FollowerCaches caches([&engine] { return engine.new_cache(); });
  std::vector<int64_t> words;
  std::vector<SequenceStep> batch;
  for (int64_t step = 0;; ++step) {
    int64_t n = 0;
    D0_RETURN_IF_ERROR(world.recv(std::as_writable_bytes(std::span(&n, 1)), 0, kStepTag)
                           .with_context("waiting for rank 0's next step"));
    if (n < static_cast<int64_t>(kHeaderWords) || n > kMaxWords)
      return internal_error(fmt::format("step mirror: a message of {} words from rank 0", n));
    words.resize(static_cast<size_t>(n));
    D0_RETURN_IF_ERROR(world.recv(std::as_writable_bytes(std::span(words)), 0, kStepTag)
                           .with_context("receiving rank 0's step"));
    auto message = decode_step_message(words);
    if (!message.is_ok()) return message.status().with_context(fmt::format("message {}", step));
    for (const CacheOp& op : message->ops) D0_RETURN_IF_ERROR(caches.apply(op));
    if (message->kind == StepMessageKind::kClose) {
      // Rank 0 let go of every sequence and prefix entry before closing: so must this rank have.
      const int64_t held = engine.kv_pool().stats().blocks_allocated;
      if (caches.sequences() != 0 || caches.entries() != 0 || held != 0) {
        return internal_error(fmt::format(
            "step mirror: out of step with rank 0 at close: {} sequences, {} prefix entries, {} KV blocks "
            "still held here",
            caches.sequences(), caches.entries(), held));
      }
      return Status::ok();
    }
    if (message->kind == StepMessageKind::kKeepAlive) continue;
    batch.clear();
    size_t offset = 0;
    for (const StepMessage::Sequence& q : message->sequences) {
      auto cache = caches.for_step(q.id, q.cached);
      if (!cache.is_ok()) return cache.status().with_context(fmt::format("message {}", step));
      batch.push_back(
          {*cache, std::span<const int32_t>(message->tokens).subspan(offset, static_cast<size_t>(q.feeds))});
      offset += static_cast<size_t>(q.feeds);
    }
    auto logits = engine.forward(batch, message->last_only);
    if (!logits.is_ok()) {
      if (logits.status().code() == StatusCode::kIoError) return logits.status();  // a peer is gone
      std::fprintf(stderr, "serve (rank %d): step %lld failed as on rank 0: %s\n", world.rank(),
                   static_cast<long long>(step), logits.status().to_string().c_str());
    }
  }
}

}  // namespace day0::serve
