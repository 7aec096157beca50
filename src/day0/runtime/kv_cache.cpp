#include "day0/runtime/kv_cache.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "day0/core/error.h"

namespace day0 {

// ---- pool -----------------------------------------------------------------------------------------

KvBlockPool::KvBlockPool(int64_t first_width, int64_t second_width, KvCacheOptions options)
    : options_(options),
      first_width_(first_width),
      second_width_(second_width),
      row_bytes_(static_cast<uint64_t>(first_width + second_width) *
                 static_cast<uint64_t>(kv_dtype_bytes(options.dtype))) {
  D0_CHECK_MSG(options_.block_tokens > 0, "KV pool: block_tokens must be positive");
  D0_CHECK(first_width_ >= 0 && second_width_ >= 0);
}

void KvBlockPool::add_slab(int64_t blocks) {
  const uint64_t first_bytes = static_cast<uint64_t>(first_width_) *
                               static_cast<uint64_t>(options_.block_tokens * kv_dtype_bytes(options_.dtype));
  const uint64_t bytes = block_bytes() * static_cast<uint64_t>(blocks);
  // Default-initialised: pages are touched when rows are written, so a pool reserved up front (the
  // server's capacity) costs resident memory only as it fills.
  slabs_.push_back(std::make_unique_for_overwrite<unsigned char[]>(std::max<uint64_t>(bytes, 1)));
  unsigned char* base = slabs_.back().get();
  const auto n_old = static_cast<int32_t>(first_ptrs_.size());
  const size_t total = first_ptrs_.size() + static_cast<size_t>(blocks);
  first_ptrs_.reserve(total);
  second_ptrs_.reserve(total);
  refs_.reserve(total);
  filled_.reserve(total);
  free_.reserve(total);
  for (int64_t b = 0; b < blocks; ++b) {
    unsigned char* block = base + static_cast<uint64_t>(b) * block_bytes();
    first_ptrs_.push_back(block);
    second_ptrs_.push_back(block + first_bytes);
    refs_.push_back(0);
    filled_.push_back(0);
  }
  // Lowest ids first out of the free list.
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(n_old + static_cast<int32_t>(b));
}

void KvBlockPool::reserve(int64_t blocks) {
  const auto have = static_cast<int64_t>(free_.size());
  if (blocks > have) add_slab(std::max<int64_t>(blocks - have, 16));
}

int32_t KvBlockPool::allocate() {
  // Double the pool when empty: few slabs, amortised growth.
  if (free_.empty()) add_slab(std::max<int64_t>(16, static_cast<int64_t>(first_ptrs_.size())));
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  filled_[static_cast<size_t>(b)] = 0;
  return b;
}

void KvBlockPool::retain(int32_t block) {
  D0_CHECK(refs_[static_cast<size_t>(block)] > 0);
  ++refs_[static_cast<size_t>(block)];
}

void KvBlockPool::release(int32_t block) {
  int32_t& r = refs_[static_cast<size_t>(block)];
  D0_CHECK_MSG(r > 0, "KV pool: releasing a free block");
  if (--r == 0) {
    filled_[static_cast<size_t>(block)] = 0;
    free_.push_back(block);
  }
}

int32_t KvBlockPool::make_writable(int32_t block, int64_t rows, KvBlockCopies& copies) {
  if (refs_[static_cast<size_t>(block)] == 1) return block;
  const int32_t copy = allocate();
  copies.src.push_back(block);
  copies.dst.push_back(copy);
  copies.rows.push_back(static_cast<int32_t>(rows));
  filled_[static_cast<size_t>(copy)] = static_cast<int32_t>(rows);
  release(block);
  return copy;
}

int32_t KvBlockPool::make_writable_on_host(int32_t block) {
  if (refs_[static_cast<size_t>(block)] == 1) return block;
  const int32_t copy = allocate();
  std::memcpy(block_data(copy), block_data(block), block_bytes());
  filled_[static_cast<size_t>(copy)] = filled_[static_cast<size_t>(block)];
  release(block);
  return copy;
}

void KvBlockPool::note_filled(int32_t block, int64_t rows) {
  int32_t& f = filled_[static_cast<size_t>(block)];
  f = std::max(f, static_cast<int32_t>(rows));
}

KvBlockTable KvBlockPool::table() const {
  KvBlockTable t;
  t.dtype = options_.dtype;
  t.block_tokens = options_.block_tokens;
  t.first_width = first_width_;
  t.second_width = second_width_;
  t.first_blocks = first_ptrs_.data();
  t.second_blocks = second_ptrs_.data();
  t.n_blocks = static_cast<int64_t>(first_ptrs_.size());
  t.space = MemorySpace::kHost;  // slabs from the heap
  return t;
}

void KvBlockPool::set_state_block_bytes(uint64_t bytes) {
  const uint64_t stride = (bytes + 63) / 64 * 64;
  if (state_stride_ == 0) {
    state_stride_ = stride;
    return;
  }
  D0_CHECK_MSG(stride == state_stride_,
               fmt::format("KV pool: a recurrent state of {} bytes in a pool of {}-byte "
                           "state blocks",
                           bytes, state_stride_));
}

void KvBlockPool::add_state_slab(int64_t blocks) {
  D0_CHECK_MSG(state_stride_ > 0, "KV pool: state blocks of unknown size");
  state_slabs_.push_back(
      std::make_unique_for_overwrite<unsigned char[]>(state_stride_ * static_cast<uint64_t>(blocks)));
  unsigned char* base = state_slabs_.back().get();
  const auto n_old = static_cast<int32_t>(state_ptrs_.size());
  for (int64_t b = 0; b < blocks; ++b) {
    state_ptrs_.push_back(base + static_cast<uint64_t>(b) * state_stride_);
    state_refs_.push_back(0);
  }
  for (int64_t b = blocks - 1; b >= 0; --b) state_free_.push_back(n_old + static_cast<int32_t>(b));
}

int32_t KvBlockPool::allocate_state() {
  // Double when empty, like the KV blocks: few slabs, amortised growth.
  if (state_free_.empty()) add_state_slab(std::max<int64_t>(4, static_cast<int64_t>(state_ptrs_.size())));
  const int32_t b = state_free_.back();
  state_free_.pop_back();
  state_refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void KvBlockPool::retain_state(int32_t block) {
  D0_CHECK(state_refs_[static_cast<size_t>(block)] > 0);
  ++state_refs_[static_cast<size_t>(block)];
}

void KvBlockPool::release_state(int32_t block) {
  int32_t& r = state_refs_[static_cast<size_t>(block)];
  D0_CHECK_MSG(r > 0, "KV pool: releasing a free state block");
  if (--r == 0) state_free_.push_back(block);
}

KvPoolStats KvBlockPool::stats() const {
  KvPoolStats s;
  s.blocks_free = static_cast<int64_t>(free_.size());
  for (size_t b = 0; b < refs_.size(); ++b) {
    if (refs_[b] == 0) continue;
    ++s.blocks_allocated;
    s.slots_used += filled_[b];
  }
  s.slots_allocated = s.blocks_allocated * options_.block_tokens;
  s.bytes_allocated = static_cast<uint64_t>(s.blocks_allocated) * block_bytes();
  s.state_blocks_allocated = static_cast<int64_t>(state_refs_.size() - state_free_.size());
  s.state_bytes_allocated = static_cast<uint64_t>(s.state_blocks_allocated) * state_stride_;
  return s;
}

// ---- one sequence -----------------------------------------------------------------------------------

KvCache::KvCache(std::shared_ptr<KvBlockPool> pool, const ModelSpec& spec, int64_t layer_begin,
                 int64_t layer_end)
    : pool_(std::move(pool)), layers_(static_cast<size_t>(spec.n_layers)) {
  D0_CHECK(pool_ != nullptr);
  if (layer_end < 0) layer_end = spec.n_layers;
  const auto window_elem = static_cast<uint64_t>(kv_dtype_bytes(pool_->options().window_dtype));
  for (size_t l = 0; l < layers_.size() && l < spec.layers.size(); ++l) {
    layers_[l].mask = spec.layers[l].mask;
    layers_[l].window = spec.layers[l].window;
    const LayerSpec& ls = spec.layers[l];
    const bool compressed_kv = ls.kv_compress_ratio > 0 && layer_has_kv(ls);
    recurrent_model_ = recurrent_model_ || layer_is_recurrent(ls) || compressed_kv;
    if (static_cast<int64_t>(l) < layer_begin || static_cast<int64_t>(l) >= layer_end) {
      layers_[l].held = false;
      layers_[l].paged = false;
      continue;
    }
    if (compressed_kv) add_compressed(spec, layers_[l]);
    if (layer_has_kv(ls)) continue;
    layers_[l].paged = false;  // an FFN-only layer keeps nothing; recurrent layers their state
    if (!layer_is_recurrent(ls)) continue;
    int64_t channels = 0, kernel = 0, state = 0;
    if (ls.mamba) {
      D0_CHECK_MSG(spec.mamba.has_value(), "KV cache: a Mamba-2 layer without its sizes");
      const MambaSpec& m = *spec.mamba;
      channels = m.conv_channels();
      kernel = m.conv_kernel;
      state = m.n_heads * m.head_dim * m.state_size;
    } else {
      D0_CHECK_MSG(spec.linear_attention.has_value(), "KV cache: a linear-attention layer without its sizes");
      const LinearAttentionSpec& la = *spec.linear_attention;
      channels = la.conv_channels();
      kernel = la.conv_kernel;
      state = la.n_value_heads * la.key_head_dim * la.value_head_dim;
    }
    layers_[l].state = static_cast<int32_t>(recurrent_.size());
    StatePart part;
    part.state_floats = static_cast<uint64_t>(state);
    part.window_bytes = static_cast<uint64_t>(channels * (kernel - 1)) * window_elem;
    part.tokens = state_tokens_.size();
    recurrent_.push_back(part);
    state_tokens_.push_back(0);
  }
  if (state_tokens_.empty()) return;
  // Every layer's float32 state and compressed partial groups first, then the windows.
  uint64_t at = 0;
  for (StatePart& p : recurrent_) {
    p.state_offset = at;
    at += p.state_floats * sizeof(float);
  }
  for (CompressedPart& p : compressed_) {
    p.offset = at;
    at += p.floats() * sizeof(float);
  }
  for (StatePart& p : recurrent_) {
    p.window_offset = at;
    at += p.window_bytes;
  }
  state_bytes_ = at;
  pool_->set_state_block_bytes(state_bytes_);
  live_ = pool_->allocate_state();
  std::memset(pool_->state_data(live_), 0, state_bytes_);  // zero bits are 0.0 in F32 and BF16
}

RecurrentLayerState KvCache::recurrent(int64_t layer) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  if (l.state < 0) return {};
  own_live();
  const StatePart& p = recurrent_[static_cast<size_t>(l.state)];
  unsigned char* base = pool_->state_data(live_);
  return {base + p.window_offset, reinterpret_cast<float*>(base + p.state_offset), &state_tokens_[p.tokens]};
}

void KvCache::add_compressed(const ModelSpec& spec, Layer& layer) {
  const LayerSpec& ls = spec.layers[static_cast<size_t>(&layer - layers_.data())];
  D0_CHECK_MSG(spec.compressed_kv.has_value(), "KV cache: a compressed KV layer without its sizes");
  const int64_t m = ls.kv_compress_ratio, d = spec.head_dim,
                block_elements =
                    pool_->block_bytes() / static_cast<uint64_t>(kv_dtype_bytes(pool_->options().dtype));
  CompressedPart part;
  const bool sparse = ls.compressed_sparse;
  part.compressor = {.ratio = m, .channels = sparse ? 2 * d : d, .width = d, .overlap = sparse};
  if (sparse) {
    const int64_t di = spec.compressed_kv->index_head_dim;
    part.indexer = {.ratio = m, .channels = 2 * di, .width = di, .overlap = true};
  }
  for (const auto& [table, shape] :
       {std::pair{&layer.entries[0], &part.compressor}, std::pair{&layer.entries[1], &part.indexer}}) {
    if (shape->ratio == 0) continue;
    table->width = shape->width;
    table->per_block = block_elements / shape->width;
    D0_CHECK_MSG(table->per_block > 0, fmt::format("KV cache: a compressed entry of {} elements is wider "
                                                   "than a pool block of {}",
                                                   shape->width, block_elements));
  }
  part.tokens = state_tokens_.size();
  layer.part = static_cast<int32_t>(compressed_.size());
  compressed_.push_back(part);
  state_tokens_.push_back(0);
}

CompressedKvLayerState KvCache::compressed(int64_t layer) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  if (l.part < 0) return {};
  own_live();
  const CompressedPart& p = compressed_[static_cast<size_t>(l.part)];
  auto* at = reinterpret_cast<float*>(pool_->state_data(live_) + p.offset);
  CompressedKvLayerState st{p.compressor, p.indexer, &state_tokens_[p.tokens]};
  for (CompressorState* c : {&st.compressor, &st.indexer}) {
    if (c->ratio == 0) continue;
    const int64_t tail = (c->ratio - 1) * c->channels, prior = c->ratio * c->width;
    c->tail_kv = at;
    c->tail_gate = at + tail;
    at += 2 * tail;
    if (c->overlap) {
      c->prior_kv = at;
      c->prior_gate = at + prior;
      at += 2 * prior;
    }
  }
  return st;
}

int64_t KvCache::entries(int64_t layer, CompressedEntries which) const {
  return layers_[static_cast<size_t>(layer)].entries[static_cast<size_t>(which)].n;
}

void* KvCache::append_entry(int64_t layer, CompressedEntries which) {
  Layer::EntryTable& e = layers_[static_cast<size_t>(layer)].entries[static_cast<size_t>(which)];
  D0_CHECK_MSG(e.width > 0, fmt::format("KV cache: layer {} has no such compressed entries", layer));
  const auto index = static_cast<size_t>(e.n / e.per_block);
  const int64_t slot = e.n % e.per_block;
  if (index == e.blocks.size()) {
    e.blocks.push_back(pool_->allocate());
  } else {
    e.blocks[index] = pool_->make_writable_on_host(e.blocks[index]);
  }
  const int32_t b = e.blocks[index];
  const auto entry_bytes = static_cast<uint64_t>(e.width * kv_dtype_bytes(pool_->options().dtype));
  // Rows filled, for the fragmentation metric: the token rows the entries so far cover.
  const uint64_t used = static_cast<uint64_t>(slot + 1) * entry_bytes;
  pool_->note_filled(
      b, static_cast<int64_t>((used + pool_->bytes_per_token_row() - 1) / pool_->bytes_per_token_row()));
  ++e.n;
  return pool_->block_data(b) + static_cast<uint64_t>(slot) * entry_bytes;
}

KvPages KvCache::entry_pages(int64_t layer, CompressedEntries which) const {
  const Layer::EntryTable& e = layers_[static_cast<size_t>(layer)].entries[static_cast<size_t>(which)];
  KvPages p;
  p.dtype = pool_->options().dtype;
  p.block_tokens = std::max<int64_t>(1, e.per_block);
  p.first_width = 0;
  p.second_width = e.width;
  p.first_blocks = pool_->first_table();  // a block's first row starts at its base
  p.second_blocks = pool_->first_table();
  p.table = e.blocks;
  p.length = e.n;
  return p;
}

void KvCache::cut_entries(Layer::EntryTable& e, int64_t n) {
  if (e.width == 0 || n >= e.n) return;
  const auto keep = static_cast<size_t>((n + e.per_block - 1) / e.per_block);
  for (size_t i = keep; i < e.blocks.size(); ++i) pool_->release(e.blocks[i]);
  e.blocks.resize(std::min(keep, e.blocks.size()));
  e.n = n;
}

void KvCache::snapshot_compressed(int64_t layer) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  D0_CHECK_MSG(pending_.tokens >= 0 && l.part >= 0, "KV cache: no snapshot planned for this layer");
  const CompressedPart& p = compressed_[static_cast<size_t>(l.part)];
  std::memcpy(pool_->state_data(pending_.block) + p.offset, pool_->state_data(live_) + p.offset,
              p.floats() * sizeof(float));
  ++pending_parts_;
}

void KvCache::own_live() {
  if (live_ < 0 || pool_->state_ref_count(live_) == 1) return;
  const int32_t copy = pool_->allocate_state();
  std::memcpy(pool_->state_data(copy), pool_->state_data(live_), state_bytes_);
  pool_->release_state(live_);
  live_ = copy;
}

bool KvCache::state_lost() const {
  return std::any_of(state_tokens_.begin(), state_tokens_.end(), [](int64_t t) { return t < 0; });
}

KvDtype KvCache::window_dtype() const {
  return pool_->options().window_dtype;
}

int64_t KvCache::state_blocks_held() const {
  std::vector<int32_t> blocks;
  collect_state_blocks(blocks);
  std::sort(blocks.begin(), blocks.end());
  return static_cast<int64_t>(std::unique(blocks.begin(), blocks.end()) - blocks.begin());
}

void KvCache::collect_state_blocks(std::vector<int32_t>& out) const {
  for (int32_t b : {live_, boundary_.block, checkpoint_.block, pending_.block})
    if (b >= 0) out.push_back(b);
}

KvCache::~KvCache() {
  release_all();
}

KvCache::KvCache(KvCache&& other) noexcept
    : pool_(std::move(other.pool_)),
      layers_(std::move(other.layers_)),
      recurrent_(std::move(other.recurrent_)),
      compressed_(std::move(other.compressed_)),
      state_tokens_(std::move(other.state_tokens_)),
      state_bytes_(other.state_bytes_),
      recurrent_model_(other.recurrent_model_),
      live_(other.live_),
      boundary_(other.boundary_),
      checkpoint_(other.checkpoint_),
      pending_(other.pending_),
      pending_parts_(other.pending_parts_),
      length_(other.length_) {
  other.layers_.clear();
  other.recurrent_.clear();
  other.compressed_.clear();
  other.state_tokens_.clear();
  other.live_ = -1;
  other.boundary_ = other.checkpoint_ = other.pending_ = Snapshot{};
  other.length_ = 0;
}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
  if (this != &other) {
    release_all();
    pool_ = std::move(other.pool_);
    layers_ = std::move(other.layers_);
    recurrent_ = std::move(other.recurrent_);
    compressed_ = std::move(other.compressed_);
    state_tokens_ = std::move(other.state_tokens_);
    state_bytes_ = other.state_bytes_;
    recurrent_model_ = other.recurrent_model_;
    live_ = other.live_;
    boundary_ = other.boundary_;
    checkpoint_ = other.checkpoint_;
    pending_ = other.pending_;
    pending_parts_ = other.pending_parts_;
    length_ = other.length_;
    other.layers_.clear();
    other.recurrent_.clear();
    other.compressed_.clear();
    other.state_tokens_.clear();
    other.live_ = -1;
    other.boundary_ = other.checkpoint_ = other.pending_ = Snapshot{};
    other.length_ = 0;
  }
  return *this;
}

void KvCache::release_snapshot(Snapshot& s) {
  if (s.block >= 0) pool_->release_state(s.block);
  s = Snapshot{};
}

void KvCache::release_all() {
  if (!pool_) return;
  for (Layer& l : layers_) {
    for (int32_t b : l.blocks) pool_->release(b);
    l.blocks.clear();
    for (Layer::EntryTable& e : l.entries) {
      for (int32_t b : e.blocks) pool_->release(b);
      e.blocks.clear();
      e.n = 0;
    }
  }
  if (live_ >= 0) pool_->release_state(live_);
  live_ = -1;
  release_snapshot(boundary_);
  release_snapshot(checkpoint_);
  release_snapshot(pending_);
}

void KvCache::retain_blocks() const {
  for (const Layer& l : layers_) {
    for (int32_t b : l.blocks) pool_->retain(b);
    for (const Layer::EntryTable& e : l.entries)
      for (int32_t b : e.blocks) pool_->retain(b);
  }
  for (int32_t b : {live_, boundary_.block, checkpoint_.block})
    if (b >= 0) pool_->retain_state(b);
}

KvCache KvCache::fork() const {
  D0_CHECK_MSG(pending_.tokens < 0, "KV cache: fork during a step");
  KvCache copy(pool_, ModelSpec{});
  copy.layers_ = layers_;
  copy.recurrent_ = recurrent_;
  copy.compressed_ = compressed_;
  copy.state_tokens_ = state_tokens_;
  copy.state_bytes_ = state_bytes_;
  copy.recurrent_model_ = recurrent_model_;
  copy.live_ = live_;
  copy.boundary_ = boundary_;
  copy.checkpoint_ = checkpoint_;
  copy.length_ = length_;
  retain_blocks();
  return copy;
}

void KvCache::drop_before(Layer& l, int64_t keep_from) {
  const int64_t bt = pool_->options().block_tokens;
  size_t drop = 0;
  while (drop < l.blocks.size() && l.first_block_pos + static_cast<int64_t>(drop + 1) * bt <= keep_from &&
         l.first_block_pos + static_cast<int64_t>(drop + 1) * bt <= l.rows) {
    ++drop;
  }
  if (drop == 0) return;
  for (size_t i = 0; i < drop; ++i) pool_->release(l.blocks[i]);
  l.blocks.erase(l.blocks.begin(), l.blocks.begin() + static_cast<std::ptrdiff_t>(drop));
  l.first_block_pos += static_cast<int64_t>(drop) * bt;
}

void KvCache::append(Backend& backend, int64_t layer, ConstMatrix first, ConstMatrix second) {
  D0_CHECK_MSG(first.rows == second.rows, "KV cache: k and v row counts differ");
  std::vector<int64_t> slots;
  KvBlockCopies copies;
  append_slots(layer, first.rows, slots, copies);
  const KvBlockTable table = pool_->table();
  if (!copies.empty()) backend.kv_copy_blocks({copies.src, copies.dst, copies.rows, table});
  backend.kv_write({first, second, slots, table});
}

void KvCache::append_slots(int64_t layer, int64_t rows, std::vector<int64_t>& slots, KvBlockCopies& copies) {
  D0_CHECK(layer >= 0 && layer < n_layers());
  Layer& l = layers_[static_cast<size_t>(layer)];
  D0_CHECK_MSG(l.paged, "KV cache: a linear-attention layer keeps no KV rows");
  D0_CHECK_MSG(l.rows >= length_, "KV cache: layer behind the committed length");
  // The earliest query of this step sits at l.rows (before the append); keys it cannot see go.
  if (l.window > 0 && l.mask == AttentionMask::kSliding) drop_before(l, l.rows - l.window + 1);
  if (l.window > 0 && l.mask == AttentionMask::kChunked) drop_before(l, (l.rows / l.window) * l.window);
  const int64_t bt = pool_->options().block_tokens;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t offset = (l.rows - l.first_block_pos) % bt;
    const auto index = static_cast<size_t>((l.rows - l.first_block_pos) / bt);
    if (index == l.blocks.size()) {
      l.blocks.push_back(pool_->allocate());
    } else if (offset == 0 || pool_->ref_count(l.blocks[index]) > 1) {
      l.blocks[index] = pool_->make_writable(l.blocks[index], offset, copies);
    }
    const int32_t b = l.blocks[index];
    slots.push_back(static_cast<int64_t>(b) * bt + offset);
    pool_->note_filled(b, offset + 1);
    ++l.rows;
  }
}

void KvCache::commit(int64_t new_tokens) {
  length_ += new_tokens;
  for (Layer& l : layers_) {
    if (!l.paged) l.rows = length_;  // no rows of its own: it follows the length
    D0_CHECK_MSG(l.rows == length_, "KV cache: a layer missed the step");
  }
  for (const int64_t t : state_tokens_)
    D0_CHECK_MSG(t == length_, "KV cache: a recurrent state missed the step");
  if (pending_.tokens >= 0) {
    D0_CHECK_MSG(pending_.tokens <= length_ && pending_parts_ == 2 * static_cast<int64_t>(recurrent_.size()) +
                                                                     static_cast<int64_t>(compressed_.size()),
                 "KV cache: a recurrent or compressed KV layer missed the step's snapshot");
    release_snapshot(boundary_);
    boundary_ = pending_;
    pending_ = Snapshot{};
    pending_parts_ = 0;
  }
}

int64_t KvCache::plan_snapshot(int64_t rows) {
  D0_CHECK_MSG(pending_.tokens < 0, "KV cache: a snapshot is already planned");
  if (!recurrent_model_ || rows <= 0) return 0;
  const int64_t bt = pool_->options().block_tokens;
  const int64_t boundary = (length_ + rows) / bt * bt;
  if (boundary <= length_) return 0;
  pending_.tokens = boundary;
  pending_parts_ = 0;
  // A block of its own: the last snapshot stays until commit(), for a step that fails part-way.
  if (live_ >= 0) pending_.block = pool_->allocate_state();
  return boundary - length_;
}

void KvCache::snapshot_window(int64_t layer) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  D0_CHECK_MSG(pending_.tokens >= 0 && l.state >= 0, "KV cache: no snapshot planned for this layer");
  const StatePart& p = recurrent_[static_cast<size_t>(l.state)];
  std::memcpy(pool_->state_data(pending_.block) + p.window_offset, pool_->state_data(live_) + p.window_offset,
              p.window_bytes);
  ++pending_parts_;
}

void KvCache::snapshot_state(int64_t layer) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  D0_CHECK_MSG(pending_.tokens >= 0 && l.state >= 0, "KV cache: no snapshot planned for this layer");
  const StatePart& p = recurrent_[static_cast<size_t>(l.state)];
  std::memcpy(pool_->state_data(pending_.block) + p.state_offset, pool_->state_data(live_) + p.state_offset,
              p.state_floats * sizeof(float));
  ++pending_parts_;
}

void KvCache::checkpoint() {
  D0_CHECK_MSG(pending_.tokens < 0, "KV cache: checkpoint during a step");
  release_snapshot(checkpoint_);
  checkpoint_.tokens = length_;
  if (live_ >= 0) {
    checkpoint_.block = live_;  // shared: the next step's write copies the live state first
    pool_->retain_state(live_);
  }
}

void KvCache::drop_checkpoint() {
  release_snapshot(checkpoint_);
}

void KvCache::restore(const Snapshot& s) {
  if (live_ >= 0) {
    D0_CHECK(s.block >= 0);
    pool_->retain_state(s.block);
    pool_->release_state(live_);
    live_ = s.block;
  }
  std::fill(state_tokens_.begin(), state_tokens_.end(), s.tokens);
}

bool KvCache::can_truncate(int64_t tokens) const {
  if (tokens < 0 || tokens > length_) return false;
  for (const Layer& l : layers_) {
    if (!l.held || !l.paged) continue;  // no keys of its own to give back
    int64_t needed = 0;                 // the first position a query at `tokens` can see
    if (l.window > 0 && l.mask == AttentionMask::kSliding)
      needed = std::max<int64_t>(0, tokens - l.window + 1);
    if (l.window > 0 && l.mask == AttentionMask::kChunked) needed = (tokens / l.window) * l.window;
    if (needed < l.first_block_pos && tokens > 0) return false;
  }
  if (!recurrent_model_ || tokens == 0 || boundary_.tokens == tokens || checkpoint_.tokens == tokens)
    return true;
  return tokens == length_ &&
         std::all_of(state_tokens_.begin(), state_tokens_.end(), [&](int64_t t) { return t == tokens; });
}

Status KvCache::truncate(int64_t tokens) {
  if (tokens < 0 || tokens > length_)
    return out_of_range(fmt::format("KV cache: truncate to {} tokens, holding {}", tokens, length_));
  // A step that failed part-way drops the snapshot it planned.
  release_snapshot(pending_);
  pending_parts_ = 0;
  const int64_t bt = pool_->options().block_tokens;
  for (const Layer& l : layers_) {
    if (!l.held || !l.paged) continue;  // no keys of its own to give back
    int64_t needed = 0;                 // the first position a query at `tokens` can see
    if (l.window > 0 && l.mask == AttentionMask::kSliding)
      needed = std::max<int64_t>(0, tokens - l.window + 1);
    if (l.window > 0 && l.mask == AttentionMask::kChunked) needed = (tokens / l.window) * l.window;
    if (needed < l.first_block_pos && tokens > 0) {
      return failed_precondition(fmt::format(
          "KV cache: cannot go back to {} tokens: a windowed layer already gave back positions before {}",
          tokens, l.first_block_pos));
    }
  }
  // A recurrent state holds exactly the tokens it absorbed: it can restart (0), stay (its own length),
  // or go back to a snapshot taken at `tokens`.
  bool lost = false;
  const int64_t had_snapshot = boundary_.tokens;
  if (recurrent_model_) {
    const bool same = tokens == length_ && std::all_of(state_tokens_.begin(), state_tokens_.end(),
                                                       [&](int64_t t) { return t == tokens; });
    if (tokens == 0) {
      if (live_ >= 0) {
        if (pool_->state_ref_count(live_) > 1) {
          pool_->release_state(live_);
          live_ = pool_->allocate_state();
        }
        std::memset(pool_->state_data(live_), 0, state_bytes_);
      }
      std::fill(state_tokens_.begin(), state_tokens_.end(), 0);
    } else if (boundary_.tokens == tokens) {
      restore(boundary_);
    } else if (checkpoint_.tokens == tokens) {
      restore(checkpoint_);
    } else if (!same) {
      std::fill(state_tokens_.begin(), state_tokens_.end(), -1);
      lost = true;
    }
    if (boundary_.tokens > tokens) release_snapshot(boundary_);
    if (checkpoint_.tokens > tokens) release_snapshot(checkpoint_);
  }
  for (Layer& l : layers_) {
    const auto keep = static_cast<size_t>(std::max<int64_t>(0, (tokens - l.first_block_pos + bt - 1) / bt));
    for (size_t i = keep; i < l.blocks.size(); ++i) pool_->release(l.blocks[i]);
    l.blocks.resize(std::min(keep, l.blocks.size()));
    l.rows = tokens;
    if (l.blocks.empty()) l.first_block_pos = (tokens / bt) * bt;
    // Entries are never rewritten: the first tokens / m are what the shorter sequence pooled.
    if (l.part >= 0) {
      const int64_t m = compressed_[static_cast<size_t>(l.part)].compressor.ratio;
      for (Layer::EntryTable& e : l.entries) cut_entries(e, tokens / m);
    }
  }
  length_ = tokens;
  if (lost) {
    return failed_precondition(fmt::format(
        "KV cache: cannot go back to {} tokens: the recurrent state (linear-attention / Mamba-2 layers, "
        "compressed KV attention's partial groups) "
        "has no snapshot there (snapshots are taken at whole blocks; this sequence had {}): restart the "
        "sequence from 0",
        tokens, had_snapshot >= 0 ? fmt::format("one at {} tokens", had_snapshot) : std::string("none")));
  }
  return Status::ok();
}

void KvCache::reserve(int64_t tokens) {
  const int64_t bt = pool_->options().block_tokens;
  int64_t blocks = 0;
  for (Layer& l : layers_) {
    if (!l.paged) continue;
    int64_t span = l.rows - l.first_block_pos + tokens;
    if (l.window > 0 && l.mask != AttentionMask::kCausal) span = std::min(span, l.window + 2 * bt);
    const int64_t need = (span + bt - 1) / bt + 1;
    l.blocks.reserve(static_cast<size_t>(need));
    blocks += std::max<int64_t>(0, need - static_cast<int64_t>(l.blocks.size()));
    if (l.part < 0) continue;
    const int64_t m = compressed_[static_cast<size_t>(l.part)].compressor.ratio;
    for (Layer::EntryTable& e : l.entries) {
      if (e.width == 0) continue;
      const int64_t entry_blocks = ((l.rows + tokens) / m + e.per_block - 1) / e.per_block + 1;
      e.blocks.reserve(static_cast<size_t>(entry_blocks));
      blocks += std::max<int64_t>(0, entry_blocks - static_cast<int64_t>(e.blocks.size()));
    }
  }
  pool_->reserve(blocks);
}

int64_t KvCache::blocks_needed(int64_t tokens) const {
  if (tokens <= 0) return 0;
  const int64_t bt = pool_->options().block_tokens;
  int64_t need = 0;
  for (const Layer& l : layers_) {
    if (!l.paged) continue;  // a linear-attention layer or another stage's: no blocks
    const int64_t span = l.rows - l.first_block_pos;
    need += std::max<int64_t>(0, (span + tokens + bt - 1) / bt - static_cast<int64_t>(l.blocks.size()));
    // The block the first new row lands in, when it exists: written in place only if not shared.
    const auto first = static_cast<size_t>(span / bt);
    if (first < l.blocks.size() && pool_->ref_count(l.blocks[first]) > 1) ++need;
    if (l.part < 0) continue;
    // Compressed entries the new tokens complete, and the same copy on write for their first block.
    const int64_t m = compressed_[static_cast<size_t>(l.part)].compressor.ratio;
    for (const Layer::EntryTable& e : l.entries) {
      if (e.width == 0) continue;
      const int64_t n = (l.rows + tokens) / m;
      need +=
          std::max<int64_t>(0, (n + e.per_block - 1) / e.per_block - static_cast<int64_t>(e.blocks.size()));
      const auto at = static_cast<size_t>(e.n / e.per_block);
      if (n > e.n && at < e.blocks.size() && pool_->ref_count(e.blocks[at]) > 1) ++need;
    }
  }
  return need;
}

KvPages KvCache::pages(int64_t layer) const {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  KvPages p;
  p.dtype = pool_->options().dtype;
  p.block_tokens = pool_->options().block_tokens;
  p.first_width = pool_->first_width();
  p.second_width = pool_->second_width();
  p.first_blocks = pool_->first_table();
  p.second_blocks = pool_->second_table();
  p.table = l.blocks;
  p.pos0 = l.first_block_pos;
  p.length = l.rows - l.first_block_pos;
  return p;
}

uint64_t KvCache::bytes() const {
  return static_cast<uint64_t>(blocks_held()) * pool_->block_bytes();
}

void KvCache::collect_blocks(std::vector<int32_t>& out) const {
  for (const Layer& l : layers_) {
    out.insert(out.end(), l.blocks.begin(), l.blocks.end());
    for (const Layer::EntryTable& e : l.entries) out.insert(out.end(), e.blocks.begin(), e.blocks.end());
  }
}

int64_t KvCache::blocks_held() const {
  int64_t n = 0;
  for (const Layer& l : layers_) {
    n += static_cast<int64_t>(l.blocks.size());
    for (const Layer::EntryTable& e : l.entries) n += static_cast<int64_t>(e.blocks.size());
  }
  return n;
}

}  // namespace day0
