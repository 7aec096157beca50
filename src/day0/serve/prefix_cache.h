#pragma once
// Prefix caching over the paged KV pool: the KV blocks of finished prompts (and whole conversations)
// are kept, keyed by a hash chain over their token prefix one full block at a time, and a new
// sequence whose prompt starts with a cached prefix begins from a fork of it (blocks shared through
// the pool's reference counts, copied only on write) instead of pre-filling it again. Only whole
// blocks are shared, and at least one prompt token is always left to feed (its logits pick the first
// token). Entries are dropped least recently used first when the pool needs blocks, or past
// max_entries.
// Hybrid models (Gated DeltaNet, Mamba-2 layers): an entry also holds the recurrent state at its end
// (the sequence's snapshot at its last whole block, KvCache::snapshot_tokens, shared as a state block),
// and is found only at its own length: a state cannot be cut back to a shorter prefix, so shorter
// prefixes of it are not keys (another entry of that length may be). Past max_state_blocks distinct
// state blocks held by entries, the least recently used entries go.
// Every entry has an id (counting up from 0, never reused), so that serving under mpirun can name it to
// the other ranks: lookup says which entry a hit forked, insert which entry it made, and a listener
// hears of every entry dropped (evicted or cleared).
// Thread safety: none; the scheduler's engine thread owns it (as it owns the pool).
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "day0/runtime/kv_cache.h"

namespace day0::serve {

class PrefixCache {
 public:
  // max_state_blocks: the most distinct recurrent-state blocks the entries may hold (0: no limit).
  PrefixCache(int64_t block_tokens, size_t max_entries = 512, int64_t max_state_blocks = 0);

  // A cache holding the longest cached whole-block prefix of `tokens` shorter than `tokens`, and how
  // many tokens it holds (a fork of entry `*entry_id`, cut back to them); nullopt on a miss (or when a
  // windowed layer cannot be cut back to it).
  std::optional<KvCache> lookup(std::span<const int32_t> tokens, int64_t* hit_tokens,
                                uint64_t* entry_id = nullptr);
  // Remembers the whole blocks of `cache`, which holds exactly `tokens` (cache.length() == size): the
  // id of the entry made (a fork of `cache` cut back to its whole blocks), or nullopt when none was
  // (already cached whole, not one whole block, or cannot be cut back there: a windowed layer gave
  // keys back, or a recurrent state has no snapshot at the last whole block).
  std::optional<uint64_t> insert(std::span<const int32_t> tokens, const KvCache& cache);
  // Drops the least recently used entry; false when there is none.
  bool evict_one();
  void clear();
  // Called with the id of every entry dropped from now on (evicted or cleared), as it goes.
  void on_drop(std::function<void(uint64_t entry_id)> listener) { on_drop_ = std::move(listener); }
  size_t entries() const { return lru_.size(); }
  // Blocks referenced by entries (a block shared by two entries counts twice).
  int64_t blocks_held() const;
  // Pool blocks the entries reference, each once (`distinct`), and those no sequence outside the cache
  // references (`exclusive`: what clearing the cache would free). With the pool's allocated blocks:
  // allocated = blocks of the live sequences (each once) + exclusive.
  // The same for recurrent-state blocks (hybrid models: each entry's state at its end).
  struct BlockCounts {
    int64_t distinct = 0;
    int64_t exclusive = 0;
    int64_t state_distinct = 0;
    int64_t state_exclusive = 0;
  };
  BlockCounts block_counts(const KvBlockPool& pool) const;

 private:
  struct Entry {
    uint64_t id = 0;
    std::vector<int32_t> tokens;  // a whole number of blocks
    KvCache cache;                // holds exactly `tokens`
  };
  using EntryList = std::list<Entry>;  // most recently used first
  struct Hit {
    EntryList::iterator entry;
    int64_t blocks = 0;  // this key is the hash of the entry's first `blocks` blocks
  };
  void forget(EntryList::iterator entry);

  int64_t state_blocks() const;  // distinct state blocks the entries reference

  int64_t block_tokens_;
  size_t max_entries_;
  int64_t max_state_blocks_;
  uint64_t next_id_ = 0;
  std::function<void(uint64_t)> on_drop_;
  EntryList lru_;
  std::unordered_map<uint64_t, Hit> by_hash_;
};

// The hash of each whole block prefix of `tokens`: [i] covers blocks 0..i.
std::vector<uint64_t> block_prefix_hashes(std::span<const int32_t> tokens, int64_t block_tokens);

}  // namespace day0::serve
