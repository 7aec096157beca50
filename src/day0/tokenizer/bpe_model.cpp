#include "day0/tokenizer/bpe_model.h"

#include <fmt/format.h>
#include <algorithm>

#include <queue>

#include "day0/tokenizer/utf8.h"

namespace day0::tokenizer {

void BpeModel::add_token(std::string key, int32_t id) {
  if (options_.byte_level && key.size() == 1) byte_ids_[static_cast<unsigned char>(key[0])] = id;
  vocab_.insert_or_assign(std::move(key), id);
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank) {
  const uint64_t k =
      (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  // The first (lowest-ranked) definition of a pair wins, as in the reference.
  merges_.try_emplace(k, Merge{rank, merged});
}

void BpeModel::finalize() {
  has_all_fallback_ = options_.byte_fallback;
  if (!options_.byte_fallback) return;
  for (int b = 0; b < 256; ++b) {
    auto id = find(fmt::format("<0x{:02X}>", b));
    fallback_ids_[b] = id ? *id : -1;
  }
}

std::optional<int32_t> BpeModel::find(std::string_view key) const {
  auto it = vocab_.find(key);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  symbols.clear();
  if (options_.byte_level) {
    for (char c : word) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        symbols.push_back(id);
      } else if (options_.unk_id) {
        symbols.push_back(*options_.unk_id);
      }
    }
    return;
  }
  size_t pos = 0;
  bool last_was_unk = false;
  std::string key;
  while (pos < word.size()) {
    char32_t cp = 0;
    size_t len = decode_utf8(word, pos, cp);
    if (len == 0) len = 1;  // callers pass valid UTF-8; stay safe anyway
    key.assign(word.substr(pos, len));
    pos += len;
    if (auto id = find(key)) {
      symbols.push_back(*id);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : key) all = all && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : key) symbols.push_back(fallback_ids_[static_cast<unsigned char>(c)]);
        last_was_unk = false;
        continue;
      }
    }
    if (options_.unk_id) {
      if (!(options_.fuse_unk && last_was_unk)) symbols.push_back(*options_.unk_id);
      last_was_unk = true;
    }
  }
}

// Few symbols: keep the rank of every adjacent pair in an array and rescan it (cheap, cache friendly).
void BpeModel::merge_small(std::vector<int32_t>& symbols) const {
  constexpr uint32_t kNone = UINT32_MAX;
  thread_local std::vector<uint32_t> ranks;
  thread_local std::vector<int32_t> merged_ids;
  const size_t n = symbols.size();
  ranks.assign(n, kNone);
  merged_ids.assign(n, -1);
  auto score = [&](size_t i) {
    const Merge* m = find_merge(symbols[i], symbols[i + 1]);
    ranks[i] = m ? m->rank : kNone;
    merged_ids[i] = m ? m->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) score(i);
  size_t size = n;
  while (size > 1) {
    uint32_t best = kNone;
    size_t at = 0;
    for (size_t i = 0; i + 1 < size; ++i) {
      if (ranks[i] < best) best = ranks[i], at = i;
    }
    if (best == kNone) break;
    symbols[at] = merged_ids[at];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    merged_ids.erase(merged_ids.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    --size;
    if (at + 1 < size)
      score(at);
    else
      ranks[at] = kNone;
    if (at > 0) score(at - 1);
  }
}

// Many symbols (a long word without pre-tokenizer splits): a heap of candidate merges over a linked
// list. Stale heap entries are detected by re-checking the ids, which identify a span uniquely.
void BpeModel::merge_large(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  struct Cand {
    uint32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  auto push = [&](int i) {
    const int j = next[i];
    if (i < 0 || j < 0) return;
    if (const Merge* m = find_merge(symbols[i], symbols[j]))
      heap.push({m->rank, i, symbols[i], symbols[j], m->merged});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int j = next[c.pos];
    if (!alive[c.pos] || j < 0 || symbols[c.pos] != c.left || symbols[j] != c.right) continue;
    symbols[c.pos] = c.merged;
    alive[j] = false;
    next[c.pos] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.pos;
    push(c.pos);
    if (prev[c.pos] >= 0) push(prev[c.pos]);
  }
  size_t w = 0;
  for (int i = 0; i < n; ++i) {
    if (alive[i]) symbols[w++] = symbols[i];
  }
  symbols.resize(w);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  initial_symbols(word, symbols);
  if (symbols.size() <= 64) {
    merge_small(symbols);
  } else {
    merge_large(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace day0::tokenizer
