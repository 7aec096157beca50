#include "day0/serve/step_mirror.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

namespace day0::serve {
namespace {

// One message is two sends on this tag: its word count, then the words.
constexpr int kStepTag = 7301;
enum MessageKind : int64_t { kStep = 1, kKeepAlive = 2, kClose = 3 };
// Words: kind, last_only, n_released, n_steps, n_tokens, released ids..., (id, cached, n) per step,
// tokens...
constexpr size_t kHeaderWords = 5;
// A follower refuses a message beyond this (a broken sender must not make it allocate without bound).
constexpr int64_t kMaxWords = int64_t{1} << 28;

double wait_seconds(const std::vector<dist::Communicator*>& groups) {
  double s = 0;
  for (const dist::Communicator* g : groups) s += g->stats().wait_seconds;
  return s;
}

}  // namespace

StepMirror::StepMirror(dist::Communicator& world, std::vector<dist::Communicator*> compute_groups,
                       double keepalive_seconds)
    : world_(world),
      groups_(std::move(compute_groups)),
      keepalive_(keepalive_seconds),
      last_sent_(std::chrono::steady_clock::now()) {}

Status StepMirror::send(std::vector<int64_t>& words) {
  const int64_t n = static_cast<int64_t>(words.size());
  for (int peer = 1; peer < world_.size(); ++peer) {
    D0_RETURN_IF_ERROR(world_.send(std::as_bytes(std::span(&n, 1)), peer, kStepTag));
    D0_RETURN_IF_ERROR(world_.send(std::as_bytes(std::span<const int64_t>(words)), peer, kStepTag));
  }
  last_sent_ = std::chrono::steady_clock::now();
  released_.clear();
  return Status::ok();
}

Status StepMirror::send_step(std::span<const uint64_t> ids, std::span<const SequenceStep> batch,
                             bool last_only) {
  D0_CHECK_MSG(ids.size() == batch.size(), "step mirror: one id per sequence of the step");
  if (closed_) return failed_precondition("step mirror: the followers were already sent away");
  size_t tokens = 0;
  for (const SequenceStep& s : batch) tokens += s.tokens.size();
  std::vector<int64_t> words;
  words.reserve(kHeaderWords + released_.size() + 3 * batch.size() + tokens);
  words.insert(words.end(), {kStep, last_only ? 1 : 0, static_cast<int64_t>(released_.size()),
                             static_cast<int64_t>(batch.size()), static_cast<int64_t>(tokens)});
  words.insert(words.end(), released_.begin(), released_.end());
  for (size_t i = 0; i < batch.size(); ++i) {
    words.insert(words.end(), {static_cast<int64_t>(ids[i]), batch[i].cache->length(),
                               static_cast<int64_t>(batch[i].tokens.size())});
  }
  for (const SequenceStep& s : batch) words.insert(words.end(), s.tokens.begin(), s.tokens.end());
  return send(words);
}

void StepMirror::release(uint64_t id) {
  released_.push_back(static_cast<int64_t>(id));
}

Status StepMirror::keepalive() {
  if (closed_) return Status::ok();
  // The followers' heartbeats arrive ten times a second while they wait: drained here, not queued.
  world_.poll();
  if (std::chrono::steady_clock::now() - last_sent_ < keepalive_) return Status::ok();
  std::vector<int64_t> words = {kKeepAlive, 0, static_cast<int64_t>(released_.size()), 0, 0};
  words.insert(words.end(), released_.begin(), released_.end());
  return send(words);
}

Status StepMirror::close() {
  if (closed_) return Status::ok();
  closed_ = true;
  std::vector<int64_t> words = {kClose, 0, 0, 0, 0};
  return send(words);
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
  std::map<int64_t, KvCache> caches;  // by rank 0's sequence id
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
    const int64_t kind = words[0], n_released = words[2], n_steps = words[3], n_tokens = words[4];
    if (n_released < 0 || n_steps < 0 || n_tokens < 0 ||
        static_cast<int64_t>(kHeaderWords) + n_released + 3 * n_steps + n_tokens != n) {
      return internal_error(fmt::format("step mirror: message {} from rank 0 is inconsistent", step));
    }
    for (int64_t i = 0; i < n_released; ++i) caches.erase(words[kHeaderWords + static_cast<size_t>(i)]);
    if (kind == kClose) return Status::ok();
    if (kind == kKeepAlive) continue;
    if (kind != kStep) return internal_error(fmt::format("step mirror: message kind {} from rank 0", kind));
    const size_t steps_at = kHeaderWords + static_cast<size_t>(n_released);
    size_t token_at = steps_at + 3 * static_cast<size_t>(n_steps);
    std::vector<int32_t> tokens(words.begin() + static_cast<std::ptrdiff_t>(token_at), words.end());
    batch.clear();
    size_t offset = 0;
    Status setup = Status::ok();
    for (int64_t i = 0; i < n_steps && setup.is_ok(); ++i) {
      const int64_t id = words[steps_at + 3 * static_cast<size_t>(i)];
      const int64_t cached = words[steps_at + 3 * static_cast<size_t>(i) + 1];
      const int64_t take = words[steps_at + 3 * static_cast<size_t>(i) + 2];
      if (take < 0 || cached < 0 || static_cast<size_t>(take) > tokens.size() - offset) {
        setup = internal_error(
            fmt::format("step mirror: message {} from rank 0: sequence {} feeds {} tokens from "
                        "{} ({} left in the message)",
                        step, id, take, cached, tokens.size() - offset));
        break;
      }
      auto it = caches.find(id);
      if (it == caches.end()) it = caches.emplace(id, engine.new_cache()).first;
      KvCache& cache = it->second;
      if (cache.length() < cached) {
        setup = internal_error(fmt::format("step mirror: sequence {} holds {} tokens here, rank 0 has {}", id,
                                           cache.length(), cached));
      } else if (cache.length() > cached) {
        if (Status st = cache.truncate(cached); !st.is_ok()) {
          // A windowed layer gave back what the shorter sequence needs: start it again (rank 0 did the
          // same; it then sends the sequence from 0).
          setup = st.with_context(fmt::format("step mirror: sequence {}", id));
        }
      }
      batch.push_back({&cache, std::span<const int32_t>(tokens).subspan(offset, static_cast<size_t>(take))});
      offset += static_cast<size_t>(take);
    }
    if (!setup.is_ok()) return setup;
    auto logits = engine.forward(batch, words[1] != 0);
    if (!logits.is_ok()) {
      if (logits.status().code() == StatusCode::kIoError) return logits.status();  // a peer is gone
      std::fprintf(stderr, "serve (rank %d): step %lld failed as on rank 0: %s\n", world.rank(),
                   static_cast<long long>(step), logits.status().to_string().c_str());
    }
  }
}

}  // namespace day0::serve
