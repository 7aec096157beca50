#pragma once
// A paged KV cache (PagedAttention). One KvBlockPool per engine holds fixed-size blocks of
// `block_tokens` token rows for one layer each (both of that layer's tensors: GQA K and V after RoPE;
// MLA the normed latent c_kv and the roped shared key k_pe, what the absorbed form needs), stored in
// BF16 by default, F32 or FP8 E4M3 on request. A KvCache is one sequence: per layer a block table
// into the pool.
//  - Growth never moves cached rows (blocks live in slabs that are never reallocated) and allocates
//    nothing once the pool has free blocks and the tables their capacity (reserve()).
//  - Sliding-window and chunked layers give back the blocks that fell out of their window.
//  - Blocks are reference counted: fork() makes a sequence that shares every block of another (a
//    common prefix); the first write into a shared, partly filled block copies it (copy on write).
//    That is the API prefix caching builds on.
//  - This class keeps the books only: the row bytes are written by the backend's kv_write kernel and
//    copy-on-write copies made by its kv_copy_blocks kernel (append_slots says where and what), so a
//    device backend holds the pool in its own memory without a change here.
// Thread safety: none; the engine's caller thread owns the pool and every cache on it.
#include <cstdint>
#include <memory>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/core/status.h"
#include "day0/model/kv_dtype.h"
#include "day0/model/model_spec.h"
#include "day0/ops/kv_pages.h"
#include "day0/ops/tensor.h"

namespace day0 {

struct KvCacheOptions {
  KvDtype dtype = KvDtype::kBF16;
  // Tokens per block. 32 keeps a block's BF16 K or V rows of one 8 x 128 head layout at 64 KiB, a
  // few L2-resident pages per attention work item, while wasting at most 31 slots per sequence and
  // layer.
  int64_t block_tokens = 32;
  // Linear-attention layers' conv windows (RecurrentLayerState): the activation precision's element
  // type (F32, or BF16 whose values are already rounded), so that keeping them loses nothing.
  KvDtype window_dtype = KvDtype::kBF16;
};

// The copy-on-write copies a step's appends need, as the kv_copy_blocks kernel takes them.
struct KvBlockCopies {
  std::vector<int32_t> src, dst, rows;
  void clear() {
    src.clear();
    dst.clear();
    rows.clear();
  }
  bool empty() const { return src.empty(); }
};

struct KvPoolStats {
  int64_t blocks_allocated = 0;  // held by at least one sequence
  int64_t blocks_free = 0;       // allocated once, now on the free list
  int64_t slots_allocated = 0;   // blocks_allocated * block_tokens
  int64_t slots_used = 0;        // token rows written into allocated blocks
  uint64_t bytes_allocated = 0;  // blocks_allocated * block bytes
  // Allocated-but-unused token slots / allocated slots (0 when nothing is allocated).
  double fragmentation() const {
    return slots_allocated > 0
               ? static_cast<double>(slots_allocated - slots_used) / static_cast<double>(slots_allocated)
               : 0.0;
  }
};

class KvBlockPool {
 public:
  KvBlockPool(int64_t first_width, int64_t second_width, KvCacheOptions options);
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  const KvCacheOptions& options() const { return options_; }
  int64_t first_width() const { return first_width_; }
  int64_t second_width() const { return second_width_; }
  // Bytes of one token row of one layer (both tensors): kv_bytes_per_token_per_layer() of the spec.
  uint64_t bytes_per_token_row() const { return row_bytes_; }
  uint64_t block_bytes() const { return row_bytes_ * static_cast<uint64_t>(options_.block_tokens); }

  // A block with reference count 1 and nothing written.
  int32_t allocate();
  void retain(int32_t block);
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
  // `block` itself when only one holder has it, else a fresh block that will hold a copy of its first
  // `rows` rows: the copy is added to `copies` (for kv_copy_blocks), the caller's reference moves.
  int32_t make_writable(int32_t block, int64_t rows, KvBlockCopies& copies);
  void note_filled(int32_t block, int64_t rows);  // rows written so far (for the fragmentation metric)
  // Grows the pool so that `blocks` more can be allocated without touching the heap.
  void reserve(int64_t blocks);

  const void* const* first_table() const { return first_ptrs_.data(); }
  const void* const* second_table() const { return second_ptrs_.data(); }
  // Every block, for the KV kernels (valid until the pool grows: take it after the step's allocations).
  KvBlockTable table() const;

  KvPoolStats stats() const;

 private:
  void add_slab(int64_t blocks);

  KvCacheOptions options_;
  int64_t first_width_;
  int64_t second_width_;
  uint64_t row_bytes_;
  std::vector<std::unique_ptr<unsigned char[]>> slabs_;
  std::vector<void*> first_ptrs_, second_ptrs_;  // by block id
  std::vector<int32_t> refs_;                    // by block id
  std::vector<int32_t> filled_;                  // by block id: rows written
  std::vector<int32_t> free_;                    // ids with refs_ == 0
};

// The fixed-size state one linear-attention layer (Gated DeltaNet) keeps for one
// sequence instead of KV rows: its conv window and its delta-rule state. Its size does not depend on
// the sequence's length; it lives and dies with the sequence's KvCache.
struct RecurrentLayerState {
  std::vector<unsigned char> window;  // [K - 1, C] the last K - 1 pre-conv inputs, oldest first
  std::vector<float> state;           // [n_v, d_k, d_v] the delta rule's S, float32
  // Tokens absorbed: the cache's length after each step, -1 once a failed step left it ahead of the
  // committed length (the state of a shorter prefix cannot be rebuilt from it).
  int64_t tokens = 0;
};

class KvCache {
 public:
  // A sequence on `pool` for `spec` (the window of each layer decides what it keeps). Linear-attention
  // layers hold no KV rows but a RecurrentLayerState each, allocated here (zeros), its conv window in
  // the pool's window_dtype. Under pipeline parallelism only layers [layer_begin, layer_end) are held
  // (a stage's; layer_end < 0: to the last): the others keep nothing and follow the length.
  KvCache(std::shared_ptr<KvBlockPool> pool, const ModelSpec& spec, int64_t layer_begin = 0,
          int64_t layer_end = -1);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // A new sequence sharing every block of this one (same length); each copies a shared block only
  // when it writes into it. Recurrent states are copied (they are this length's).
  KvCache fork() const;

  int64_t length() const { return length_; }  // tokens cached (after commit())
  int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t first_width() const { return pool_->first_width(); }
  int64_t second_width() const { return pool_->second_width(); }
  const KvBlockPool& pool() const { return *pool_; }

  // Makes room for `rows` new rows of layer `layer`'s two tensors (GQA: k, v; MLA: c_kv, k_pe): blocks
  // allocated, shared blocks scheduled for copy into `copies`, and one slot per row appended to
  // `slots` (block * block_tokens + row in block). The caller then runs kv_copy_blocks(copies) and
  // kv_write(rows, slots), in that order, before anything reads the layer. Rows count for pages()
  // immediately; length() grows at commit() after the last layer. Sliding and chunked layers first
  // give back the blocks no query of this step or later can see.
  void append_slots(int64_t layer, int64_t rows, std::vector<int64_t>& slots, KvBlockCopies& copies);
  // append_slots and both kernels on `backend`, for one sequence (the engine batches a whole step).
  void append(Backend& backend, int64_t layer, ConstMatrix first, ConstMatrix second);
  void commit(int64_t new_tokens);
  // Keeps the first `tokens` tokens (undo, or a conversation that diverged from what was cached).
  // FailedPrecondition when a windowed layer already gave back keys the shorter sequence would need,
  // or when a recurrent state would have to go back to a length it no longer holds (only the current
  // length, or 0, which resets it): such a state is then marked lost, and a later step on it fails.
  Status truncate(int64_t tokens);
  // Makes room for `tokens` more tokens: pool blocks and table capacity (no allocation while they last).
  void reserve(int64_t tokens);
  // Blocks the pool would hand out if every layer kept here appended `tokens` rows now, as append_slots
  // does: new blocks past each table's end, plus a copy of a shared block the first row lands in (copy
  // on write). Blocks windowed layers give back on the way are not subtracted, and a shared block counts
  // as copied even if its other holder copies it first this step: both over-estimates, safe to plan with.
  int64_t blocks_needed(int64_t tokens) const;

  // The paged view of a layer (valid until the next append or truncate on any cache of the pool).
  KvPages pages(int64_t layer) const;
  // Bytes of the blocks this sequence holds (shared blocks counted in full), and blocks held.
  uint64_t bytes() const;
  int64_t blocks_held() const;
  // Appends the pool block of every layer's table entry (a block shared between layers or with another
  // sequence appears as often as it is referenced here).
  void collect_blocks(std::vector<int32_t>& out) const;

  // Whether layer `layer` keeps K/V rows in the pool (false: a linear-attention layer).
  bool paged(int64_t layer) const { return layers_[static_cast<size_t>(layer)].paged; }
  // Whether this cache keeps layer `layer` at all (false: another pipeline stage's layer, no blocks).
  bool held(int64_t layer) const { return layers_[static_cast<size_t>(layer)].held; }
  // The recurrent state of linear-attention layer `layer` (null for a paged layer).
  RecurrentLayerState* recurrent(int64_t layer);
  bool has_recurrent_state() const { return !states_.empty(); }
  KvDtype window_dtype() const;
  // Bytes of the recurrent states (recurrent_state_bytes_per_sequence() of the spec), fixed per sequence.
  uint64_t state_bytes() const;

 private:
  struct Layer {
    std::vector<int32_t> blocks;
    int64_t first_block_pos = 0;  // position of row 0 of blocks[0]
    int64_t rows = 0;             // positions held end at rows - 1 (includes the current step)
    AttentionMask mask = AttentionMask::kCausal;
    int64_t window = 0;
    bool paged = true;   // false: a linear-attention layer (no KV rows; rows follow the length)
    bool held = true;    // false: another pipeline stage's layer (nothing kept; rows follow the length)
    int32_t state = -1;  // index into states_ of a linear-attention layer
  };
  void release_all();
  // Gives back leading blocks whose every position is below `keep_from`.
  void drop_before(Layer& l, int64_t keep_from);

  std::shared_ptr<KvBlockPool> pool_;
  std::vector<Layer> layers_;
  std::vector<RecurrentLayerState> states_;  // one per linear-attention layer
  int64_t length_ = 0;
};

}  // namespace day0
