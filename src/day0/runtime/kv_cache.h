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
//  - Recurrent state (Gated DeltaNet and Mamba-2 layers) is a second kind of pool block: one state
//    block holds a sequence's whole state (every held recurrent layer's conv window and float32 state
//    matrix), with the same books (reference counts, shared by fork(), copied before a write while
//    shared, freed with its last holder). A cache holds its live state block and snapshots of it taken
//    at token boundaries: the engine takes one at the last whole-block boundary each step passes
//    (plan_snapshot), so that a fork cut back to whole blocks (a prefix-cache entry) restores the state
//    of exactly its length, and checkpoint() takes one at the current length (a rollback point).
//  - Compressed KV attention layers (LayerSpec::kv_compress_ratio m) keep their window of raw rows in the
//    pool like any sliding layer, and two more things. Their pooled entries (the compressor's, and on
//    compressed sparse layers the indexer's) sit in KV blocks of the same pool, each in a block table
//    of its own per layer: entry i at slot i of that table, packed block_bytes / entry bytes to a block
//    (append-only, shared by fork() and copied before a write while shared, cut to t / m entries by
//    truncate(t)). Their partial groups (the float32 projections of the tokens past the last complete
//    window, and with overlapping windows the last window's first halves) are fixed-size parts of the
//    sequence's state block, beside the recurrent layers' parts: snapshots, checkpoint() and truncate()
//    treat them as recurrent state, so a compressed model goes back to any length a snapshot holds.
//  - This class keeps the books only: the row bytes are written by the backend's kv_write kernel and
//    copy-on-write copies made by its kv_copy_blocks kernel (append_slots says where and what), so a
//    device backend holds the pool in its own memory without a change here. State blocks are host
//    memory the recurrent kernels update in place (copies between them are host copies), and compressed
//    entries are written, read and copied on the host (the pool is host memory on every backend here).
// Thread safety: none; the engine's caller thread owns the pool and every cache on it.
#include <array>
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
  // Recurrent-state blocks (live states and snapshots) held by at least one sequence or prefix entry,
  // and their bytes (state_blocks_allocated * state_block_bytes()).
  int64_t state_blocks_allocated = 0;
  uint64_t state_bytes_allocated = 0;
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
  // The same for a block written on the host (compressed entries): a shared block is copied here, whole.
  int32_t make_writable_on_host(int32_t block);
  // A block's bytes (block_bytes()), for the host's reads and writes of compressed entries.
  unsigned char* block_data(int32_t block) {
    return static_cast<unsigned char*>(first_ptrs_[static_cast<size_t>(block)]);
  }
  void note_filled(int32_t block, int64_t rows);  // rows written so far (for the fragmentation metric)
  // Grows the pool so that `blocks` more can be allocated without touching the heap.
  void reserve(int64_t blocks);

  const void* const* first_table() const { return first_ptrs_.data(); }
  const void* const* second_table() const { return second_ptrs_.data(); }
  // Every block, for the KV kernels (valid until the pool grows: take it after the step's allocations).
  KvBlockTable table() const;

  KvPoolStats stats() const;
  // stats().blocks_allocated without the walk over every block (a bound checked per sequence).
  int64_t blocks_allocated() const { return static_cast<int64_t>(refs_.size() - free_.size()); }

  // ---- recurrent-state blocks -------------------------------------------------------------------
  // Bytes one state block takes (a sequence's recurrent state, rounded up to 64 bytes); 0 until the
  // first cache with recurrent layers sets it (set_state_block_bytes: every later one must agree).
  uint64_t state_block_bytes() const { return state_stride_; }
  void set_state_block_bytes(uint64_t bytes);
  // A state block with reference count 1, its bytes unset.
  int32_t allocate_state();
  void retain_state(int32_t block);
  void release_state(int32_t block);
  int32_t state_ref_count(int32_t block) const { return state_refs_[static_cast<size_t>(block)]; }
  unsigned char* state_data(int32_t block) { return state_ptrs_[static_cast<size_t>(block)]; }
  const unsigned char* state_data(int32_t block) const { return state_ptrs_[static_cast<size_t>(block)]; }

 private:
  void add_slab(int64_t blocks);
  void add_state_slab(int64_t blocks);

  KvCacheOptions options_;
  int64_t first_width_;
  int64_t second_width_;
  uint64_t row_bytes_;
  std::vector<std::unique_ptr<unsigned char[]>> slabs_;
  std::vector<void*> first_ptrs_, second_ptrs_;  // by block id
  std::vector<int32_t> refs_;                    // by block id
  std::vector<int32_t> filled_;                  // by block id: rows written
  std::vector<int32_t> free_;                    // ids with refs_ == 0
  // State blocks: their own slabs (never reallocated), counts and free list.
  uint64_t state_stride_ = 0;
  std::vector<std::unique_ptr<unsigned char[]>> state_slabs_;
  std::vector<unsigned char*> state_ptrs_;  // by state block id
  std::vector<int32_t> state_refs_;         // by state block id
  std::vector<int32_t> state_free_;         // ids with state_refs_ == 0
};

// One recurrent layer's part of a sequence's live state block (Gated DeltaNet, Mamba-2): its conv window
// and its float32 state, fixed in size whatever the sequence's length.
struct RecurrentLayerState {
  unsigned char* window = nullptr;  // [K - 1, C] the last K - 1 pre-conv inputs, oldest first (window_dtype)
  float* state = nullptr;           // [n_v, d_k, d_v] the delta rule's S (Mamba-2: [heads, head_dim, N])
  // Tokens absorbed: the cache's length after each step, -1 once a failed step left it ahead of the
  // committed length with no snapshot to go back to.
  int64_t* tokens = nullptr;
};

// One compressor's partial group in a sequence's live state block (a compressed KV layer's own, or its
// lightning indexer's), float32, fixed in size. Which rows are valid follows from the tokens absorbed t:
// tail rows t % ratio, entries t / ratio, prior halves once an entry exists.
struct CompressorState {
  int64_t ratio = 0;     // m: tokens per entry
  int64_t channels = 0;  // C: the projections' width (2 * width where windows overlap)
  int64_t width = 0;     // an entry's width
  bool overlap = false;  // windows of 2m (compressed sparse layers)
  // The tokens past the last complete window: their kv / gate projections [m - 1, C], the gate without
  // its position bias; rows t % m valid.
  float* tail_kv = nullptr;
  float* tail_gate = nullptr;
  // Overlapping windows: the last complete window's first halves, kv [m, width] and the gate with its
  // bias [m, width] (what the next window pools beside its own); null without overlap.
  float* prior_kv = nullptr;
  float* prior_gate = nullptr;
  // Floats the four buffers take in a state block.
  uint64_t floats() const {
    return static_cast<uint64_t>(2 * (ratio - 1) * channels + (overlap ? 2 * ratio * width : 0));
  }
};

// A sequence's state of one compressed KV attention layer (KvCache::compressed()).
struct CompressedKvLayerState {
  CompressorState compressor;
  CompressorState indexer;  // compressed sparse layers only (ratio 0 elsewhere)
  // Tokens absorbed (the cache's length after each step), -1 once a failed step left it ahead of the
  // committed length with no snapshot to go back to.
  int64_t* tokens = nullptr;
};

// Which of a compressed KV layer's entry tables.
enum class CompressedEntries { kCompressor = 0, kIndexer = 1 };

class KvCache {
 public:
  // A sequence on `pool` for `spec` (the window of each layer decides what it keeps). Linear-attention
  // and Mamba-2 layers hold no KV rows but their part of the sequence's state block, allocated here
  // (zeros), conv windows in the pool's window_dtype. Under pipeline parallelism only layers
  // [layer_begin, layer_end) are held (a stage's; layer_end < 0: to the last): the others keep nothing
  // and follow the length (a stage without recurrent layers of a recurrent model still keeps the
  // snapshots' books, so that every stage can cut back to the same lengths).
  KvCache(std::shared_ptr<KvBlockPool> pool, const ModelSpec& spec, int64_t layer_begin = 0,
          int64_t layer_end = -1);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // A new sequence sharing every block of this one (same length), KV blocks (raw rows and compressed
  // entries) and state blocks (live state and snapshots) alike; each copies a shared block only when it
  // writes into it.
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
  // Ends a step of `new_tokens` tokens: a snapshot the step took (plan_snapshot) replaces the last one.
  void commit(int64_t new_tokens);
  // Keeps the first `tokens` tokens (undo, a prefix-cache entry, a conversation that diverged from
  // what was cached); compressed KV layers keep tokens / m entries. A recurrent state (and a compressed
  // layer's partial groups) goes back with it when it can: to 0 (reset), to its own length,
  // or to a snapshot taken at `tokens` (snapshot_tokens(), checkpoint_tokens()), which becomes the
  // live state (shared until the next write). FailedPrecondition (can_truncate() says so beforehand)
  // when a windowed layer already gave back keys the shorter sequence would need, or when a recurrent
  // state has no snapshot at `tokens`: the state is then marked lost, and a later step on it fails.
  // Snapshots past `tokens` are dropped.
  Status truncate(int64_t tokens);
  // Whether truncate(tokens) would succeed.
  bool can_truncate(int64_t tokens) const;
  // Makes room for `tokens` more tokens: pool blocks and table capacity (no allocation while they last).
  void reserve(int64_t tokens);
  // Blocks the pool would hand out if every layer kept here appended `tokens` rows now, as append_slots
  // does: new blocks past each table's end, plus a copy of a shared block the first row lands in (copy
  // on write). Blocks windowed layers give back on the way are not subtracted, and a shared block counts
  // as copied even if its other holder copies it first this step: both over-estimates, safe to plan with.
  int64_t blocks_needed(int64_t tokens) const;

  // The paged view of a layer (valid until the next append or truncate on any cache of the pool).
  KvPages pages(int64_t layer) const;
  // Bytes of the KV blocks this sequence holds (raw rows and compressed entries; shared blocks counted in
  // full), and blocks held. State blocks are counted apart (state_bytes(), state_blocks_held()).
  uint64_t bytes() const;
  int64_t blocks_held() const;
  // Appends the pool block of every layer's table entry (a block shared between layers or with another
  // sequence appears as often as it is referenced here).
  void collect_blocks(std::vector<int32_t>& out) const;

  // Whether layer `layer` keeps K/V rows in the pool (false: a linear-attention layer).
  bool paged(int64_t layer) const { return layers_[static_cast<size_t>(layer)].paged; }
  // Whether this cache keeps layer `layer` at all (false: another pipeline stage's layer, no blocks).
  bool held(int64_t layer) const { return layers_[static_cast<size_t>(layer)].held; }

  // ---- compressed KV attention ----------------------------------------------------------------------
  // Whether layer `layer` is a compressed KV attention layer held here.
  bool compressed_layer(int64_t layer) const { return layers_[static_cast<size_t>(layer)].part >= 0; }
  // Its partial groups in the live state block, for a step that writes them: a state block shared with a
  // fork, a prefix entry or a snapshot is copied first. All null for any other layer. Valid until the
  // next call that changes this cache's blocks.
  CompressedKvLayerState compressed(int64_t layer);
  // Entries in table `which` of layer `layer` (0 for a layer without it).
  int64_t entries(int64_t layer, CompressedEntries which) const;
  // Where the table's next entry goes ([width] in the pool's dtype, written by the caller at once); it
  // counts from now. A shared block it lands in is copied first (copy on write, on the host).
  void* append_entry(int64_t layer, CompressedEntries which);
  // The table's entries as a paged view of the key in the second tensor (first_width 0): entry j is
  // second_row(j). Valid until the pool next allocates a block.
  KvPages entry_pages(int64_t layer, CompressedEntries which) const;
  // Saves layer `layer`'s partial groups into the snapshot planned for this step (plan_snapshot), after
  // the step's rows before the snapshot's offset and before the rest.
  void snapshot_compressed(int64_t layer);

  // ---- recurrent state ------------------------------------------------------------------------------
  // The live state of recurrent layer `layer` (all null for a layer without one), for a step that
  // writes it: a state block shared with a fork, a prefix entry or a snapshot is copied first (copy on
  // write, the whole block at once). Valid until the next call that changes this cache's blocks.
  RecurrentLayerState recurrent(int64_t layer);
  // Whether this cache holds recurrent layers (a live state block).
  bool has_recurrent_state() const { return !recurrent_.empty(); }
  // Whether the model has recurrent layers or compressed KV layers, held here or not: snapshots decide
  // where truncate() can go.
  bool recurrent_model() const { return recurrent_model_; }
  // A failed step left a recurrent state ahead of the length with nothing to restore: the sequence
  // must start again from 0 (truncate(0)).
  bool state_lost() const;
  KvDtype window_dtype() const;
  // Bytes of the recurrent states and compressed KV partial groups (recurrent_state_bytes_per_sequence()
  // of the spec for the layers held here), fixed per sequence: what one state block holds (the pool
  // rounds its blocks up to 64 bytes).
  uint64_t state_bytes() const { return state_bytes_; }
  // Distinct state blocks this cache references (live state and snapshots), and every reference to one
  // (a block both live and a snapshot appears twice, as the pool counts it).
  int64_t state_blocks_held() const;
  void collect_state_blocks(std::vector<int32_t>& out) const;

  // Snapshots (engine side). Before a step of `rows` tokens: when the step passes a whole-block
  // boundary (length() < B <= length() + rows, B a multiple of block_tokens), the last one it passes is
  // where this step saves the recurrent state. Returns its offset in the step's rows (B - length(), 1
  // to rows), or 0 (no boundary, or no recurrent layer in the model). The step then runs each recurrent
  // kernel over the rows before the offset, calls snapshot_window / snapshot_state for every held
  // recurrent layer between the two kernel calls of each (snapshot_compressed for every held compressed
  // KV layer between its two parts), and over the rest; commit() keeps the
  // snapshot (the last one stays until then: a step that fails part-way can go back to it). Cost: the
  // kernels' second call for the step's rows past B, one copy of the state, and while the step runs one
  // more state block.
  int64_t plan_snapshot(int64_t rows);
  // Saves layer `layer`'s conv window, or its state matrix, into the snapshot planned for this step.
  void snapshot_window(int64_t layer);
  void snapshot_state(int64_t layer);
  // The length the last whole-block snapshot holds, or -1 (none).
  int64_t snapshot_tokens() const { return boundary_.tokens; }

  // A rollback point (speculative decoding: before draft tokens): a snapshot of the recurrent state at
  // the current length, kept apart from the whole-block snapshots until the next checkpoint(); then
  // truncate(checkpoint_tokens()) restores the state there, and accepted tokens are fed again. Free when
  // taken: the next step that writes the state copies it first (one copy of the state).
  void checkpoint();
  void drop_checkpoint();
  int64_t checkpoint_tokens() const { return checkpoint_.tokens; }

 private:
  struct Layer {
    std::vector<int32_t> blocks;
    int64_t first_block_pos = 0;  // position of row 0 of blocks[0]
    int64_t rows = 0;             // positions held end at rows - 1 (includes the current step)
    AttentionMask mask = AttentionMask::kCausal;
    int64_t window = 0;
    bool paged = true;   // false: a linear-attention layer (no KV rows; rows follow the length)
    bool held = true;    // false: another pipeline stage's layer (nothing kept; rows follow the length)
    int32_t state = -1;  // index into recurrent_ of a recurrent layer
    int32_t part = -1;   // index into compressed_ of a compressed KV attention layer
    // A compressed layer's entries (CompressedEntries order): entry i in slot i % per_block of
    // blocks[i / per_block].
    struct EntryTable {
      std::vector<int32_t> blocks;
      int64_t n = 0;          // entries held
      int64_t width = 0;      // elements per entry (0: no such table)
      int64_t per_block = 0;  // entries per pool block
    };
    std::array<EntryTable, 2> entries;
  };
  // Where a recurrent layer's part sits in a state block: the float32 states of every layer first, then
  // the conv windows (so that the floats stay aligned whatever the windows' element size).
  struct StatePart {
    uint64_t state_offset = 0, state_floats = 0;
    uint64_t window_offset = 0, window_bytes = 0;
    size_t tokens = 0;  // index into state_tokens_
  };
  // Where a compressed KV layer's partial groups sit in a state block (with the float32 states): the
  // compressor's buffers, then the indexer's. The shapes' pointers stay null here.
  struct CompressedPart {
    uint64_t offset = 0;
    CompressorState compressor, indexer;
    size_t tokens = 0;  // index into state_tokens_
    uint64_t floats() const { return compressor.floats() + indexer.floats(); }
  };
  // A snapshot: the state block holding the state after `tokens` tokens (block -1 when this cache holds
  // no recurrent layer: the books alone).
  struct Snapshot {
    int64_t tokens = -1;
    int32_t block = -1;
  };
  void release_all();
  void release_snapshot(Snapshot& s);
  // Sets up layer `layer`'s compressed KV part (entry tables, partial-group shapes, tokens).
  void add_compressed(const ModelSpec& spec, Layer& layer);
  // Keeps the first `n` entries of a table.
  void cut_entries(Layer::EntryTable& e, int64_t n);
  // Gives back leading blocks whose every position is below `keep_from`.
  void drop_before(Layer& l, int64_t keep_from);
  // The live state block, not shared with any other holder (copied first when it is).
  void own_live();
  // Makes snapshot `s` the live state (shared with it); every layer's state then holds s.tokens.
  void restore(const Snapshot& s);
  void retain_blocks() const;

  std::shared_ptr<KvBlockPool> pool_;
  std::vector<Layer> layers_;
  std::vector<StatePart> recurrent_;        // one per held recurrent layer
  std::vector<CompressedPart> compressed_;  // one per held compressed KV layer
  // One per held recurrent or compressed KV layer: RecurrentLayerState::tokens,
  // CompressedKvLayerState::tokens.
  std::vector<int64_t> state_tokens_;
  uint64_t state_bytes_ = 0;  // what the parts take in a state block
  bool recurrent_model_ = false;
  int32_t live_ = -1;          // the live state block (-1: no recurrent layer held)
  Snapshot boundary_;          // at the last whole-block boundary a step passed
  Snapshot checkpoint_;        // checkpoint()
  Snapshot pending_;           // planned for the step in flight
  int64_t pending_parts_ = 0;  // windows and states saved into pending_ so far
  int64_t length_ = 0;
};

}  // namespace day0
