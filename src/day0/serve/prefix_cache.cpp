#include "day0/serve/prefix_cache.h"

#include <algorithm>

namespace day0::serve {

std::vector<uint64_t> block_prefix_hashes(std::span<const int32_t> tokens, int64_t block_tokens) {
  std::vector<uint64_t> out;
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis, then one 64-bit mix per token
  const auto n_blocks = static_cast<int64_t>(tokens.size()) / block_tokens;
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t i = 0; i < block_tokens; ++i) {
      uint64_t x = static_cast<uint32_t>(tokens[static_cast<size_t>(b * block_tokens + i)]);
      x ^= h;
      x *= 0x9E3779B97F4A7C15ull;
      h = (x ^ (x >> 29)) * 0xBF58476D1CE4E5B9ull;
    }
    out.push_back(h ^ static_cast<uint64_t>(b + 1));
  }
  return out;
}

PrefixCache::PrefixCache(int64_t block_tokens, size_t max_entries, int64_t max_state_blocks)
    : block_tokens_(block_tokens),
      max_entries_(std::max<size_t>(max_entries, 1)),
      max_state_blocks_(std::max<int64_t>(max_state_blocks, 0)) {}

std::optional<KvCache> PrefixCache::lookup(std::span<const int32_t> tokens, int64_t* hit_tokens,
                                           uint64_t* entry_id) {
  *hit_tokens = 0;
  if (tokens.size() < 2) return std::nullopt;
  // At least one token must stay to be fed.
  const std::vector<uint64_t> hashes = block_prefix_hashes(tokens.first(tokens.size() - 1), block_tokens_);
  for (auto b = static_cast<int64_t>(hashes.size()); b > 0; --b) {
    auto it = by_hash_.find(hashes[static_cast<size_t>(b - 1)]);
    if (it == by_hash_.end() || it->second.blocks != b) continue;
    const Entry& e = *it->second.entry;
    const auto n = static_cast<size_t>(b * block_tokens_);
    if (!std::equal(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n), e.tokens.begin()))
      continue;  // a hash collision: not the same prefix
    KvCache cache = e.cache.fork();
    if (!cache.truncate(static_cast<int64_t>(n)).is_ok()) continue;
    lru_.splice(lru_.begin(), lru_, it->second.entry);
    *hit_tokens = static_cast<int64_t>(n);
    if (entry_id != nullptr) *entry_id = e.id;
    return cache;
  }
  return std::nullopt;
}

std::optional<uint64_t> PrefixCache::insert(std::span<const int32_t> tokens, const KvCache& cache) {
  const auto n_blocks = static_cast<int64_t>(tokens.size()) / block_tokens_;
  if (n_blocks == 0 || cache.length() != static_cast<int64_t>(tokens.size())) return std::nullopt;
  const auto n = static_cast<size_t>(n_blocks * block_tokens_);
  const std::vector<uint64_t> hashes = block_prefix_hashes(tokens.first(n), block_tokens_);
  auto known = by_hash_.find(hashes.back());
  if (known != by_hash_.end() && known->second.blocks == n_blocks &&
      std::equal(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n),
                 known->second.entry->tokens.begin())) {
    lru_.splice(lru_.begin(), lru_, known->second.entry);  // already cached whole
    return std::nullopt;
  }
  // A windowed layer that gave back keys, or a recurrent state without a snapshot there: no entry.
  if (!cache.can_truncate(static_cast<int64_t>(n))) return std::nullopt;
  KvCache copy = cache.fork();
  if (!copy.truncate(static_cast<int64_t>(n)).is_ok()) return std::nullopt;
  const uint64_t id = next_id_++;
  lru_.push_front(Entry{id,
                        std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n)),
                        std::move(copy)});
  // Keys: every whole-block prefix the entry can be cut back to (all of them, or with a recurrent state
  // only its own length).
  const KvCache& kept = lru_.front().cache;
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (b + 1 == n_blocks || kept.can_truncate((b + 1) * block_tokens_))
      by_hash_[hashes[static_cast<size_t>(b)]] = Hit{lru_.begin(), b + 1};
  }
  // The least recently used go first: never the new one.
  while (lru_.size() > max_entries_) evict_one();
  while (max_state_blocks_ > 0 && lru_.size() > 1 && state_blocks() > max_state_blocks_) evict_one();
  return id;
}

void PrefixCache::forget(EntryList::iterator entry) {
  std::erase_if(by_hash_, [&](const auto& kv) { return kv.second.entry == entry; });
  if (on_drop_) on_drop_(entry->id);
  lru_.erase(entry);
}

bool PrefixCache::evict_one() {
  if (lru_.empty()) return false;
  forget(std::prev(lru_.end()));
  return true;
}

void PrefixCache::clear() {
  by_hash_.clear();
  if (on_drop_) {
    for (const Entry& e : lru_) on_drop_(e.id);
  }
  lru_.clear();
}

namespace {

// Distinct blocks among `refs` (one entry per reference), and those whose every reference is there.
template <class RefCount>
void count_blocks(std::vector<int32_t>& refs, RefCount ref_count, int64_t& distinct, int64_t& exclusive) {
  std::sort(refs.begin(), refs.end());
  for (size_t i = 0; i < refs.size();) {
    size_t j = i;
    while (j < refs.size() && refs[j] == refs[i]) ++j;
    ++distinct;
    // Every reference to the block is one of the entries': nothing else would keep it.
    if (ref_count(refs[i]) == static_cast<int32_t>(j - i)) ++exclusive;
    i = j;
  }
}

}  // namespace

PrefixCache::BlockCounts PrefixCache::block_counts(const KvBlockPool& pool) const {
  std::vector<int32_t> blocks, states;
  for (const Entry& e : lru_) {
    e.cache.collect_blocks(blocks);
    e.cache.collect_state_blocks(states);
  }
  BlockCounts out;
  count_blocks(
      blocks, [&](int32_t b) { return pool.ref_count(b); }, out.distinct, out.exclusive);
  count_blocks(
      states, [&](int32_t b) { return pool.state_ref_count(b); }, out.state_distinct, out.state_exclusive);
  return out;
}

int64_t PrefixCache::state_blocks() const {
  std::vector<int32_t> states;
  for (const Entry& e : lru_) e.cache.collect_state_blocks(states);
  std::sort(states.begin(), states.end());
  return static_cast<int64_t>(std::unique(states.begin(), states.end()) - states.begin());
}

int64_t PrefixCache::blocks_held() const {
  int64_t n = 0;
  for (const Entry& e : lru_) n += e.cache.blocks_held();
  return n;
}

}  // namespace day0::serve
