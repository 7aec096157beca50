#include "day0/runtime/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "day0/core/error.h"

namespace day0 {

KvCache::KvCache(const ModelSpec& spec) : layers_(static_cast<size_t>(spec.n_layers)) {
  if (spec.attention == AttentionKind::kMla && spec.mla) {
    first_width_ = spec.mla->kv_lora_rank;
    second_width_ = spec.mla->qk_rope_head_dim;
  } else {
    first_width_ = spec.n_kv_heads * spec.head_dim;
    second_width_ = spec.n_kv_heads * spec.head_dim;
  }
}

namespace {
void append_rows(std::vector<float>& dst, int64_t old_rows, ConstMatrix src, int64_t width) {
  D0_CHECK_MSG(src.cols == width, "KV cache: appended rows have the wrong width");
  const size_t need = static_cast<size_t>((old_rows + src.rows) * width);
  if (dst.capacity() < need) dst.reserve(std::max(need, dst.capacity() * 2));
  dst.resize(need);
  for (int64_t r = 0; r < src.rows; ++r) {
    std::memcpy(dst.data() + (old_rows + r) * width, src.row(r), static_cast<size_t>(width) * sizeof(float));
  }
}
}  // namespace

void KvCache::append(int64_t layer, ConstMatrix first, ConstMatrix second) {
  D0_CHECK(layer >= 0 && layer < n_layers());
  D0_CHECK_MSG(first.rows == second.rows, "KV cache: k and v row counts differ");
  Layer& l = layers_[static_cast<size_t>(layer)];
  D0_CHECK_MSG(l.rows >= length_, "KV cache: layer behind the committed length");
  append_rows(l.first, l.rows, first, first_width_);
  append_rows(l.second, l.rows, second, second_width_);
  l.rows += first.rows;
}

ConstMatrix KvCache::first(int64_t layer) const {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  return {l.first.data(), l.rows, first_width_};
}

ConstMatrix KvCache::second(int64_t layer) const {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  return {l.second.data(), l.rows, second_width_};
}

void KvCache::commit(int64_t new_tokens) {
  length_ += new_tokens;
  for (const Layer& l : layers_) D0_CHECK_MSG(l.rows == length_, "KV cache: a layer missed the step");
}

uint64_t KvCache::bytes() const {
  uint64_t total = 0;
  for (const Layer& l : layers_) total += (l.first.size() + l.second.size()) * sizeof(float);
  return total;
}

}  // namespace day0
