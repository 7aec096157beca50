#pragma once
// Shared blocks of the decoder: norm, GQA attention (causal / sliding / chunked / sinks, NoPE and
// temperature tuning), MLA (naive and weight-absorbed), dense SwiGLU, MoE. Each takes the activations
// of all rows of a step and the per-sequence layout, and calls backend kernels only.
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/model/model_spec.h"
#include "day0/ops/rope_table.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_weights.h"

namespace day0::blocks {

// The activations of one step: one block of memory sized by the largest step seen (a batch-shape
// bucket's high-water mark of live floats), handed out front to back and reset at the next step. A
// layer's temporaries are given back at its end (mark / release), so the block holds one layer's
// worth, not the sum over layers. A step larger than any before takes extra chunks once; the next step
// merges them into one block, after which a step of that shape allocates nothing.
class StepArena {
 public:
  struct Mark {
    size_t used = 0, live = 0, chunks = 0;
  };
  void begin_step();
  // n floats, zeroed, in whole 64-byte units (16 floats); valid until the next begin_step() or the
  // release() of a mark taken before it.
  float* take(int64_t n);
  Mark mark() const { return {used_, live_, overflow_.size()}; }
  // Everything taken since `m` is given back (its memory is reused by the next takes).
  void release(const Mark& m);

 private:
  std::vector<float> main_;
  size_t used_ = 0;  // floats of main_ handed out
  size_t live_ = 0;  // floats handed out and not released (main_ and chunks)
  size_t high_ = 0;  // the most floats live at once in this step
  std::vector<std::vector<float>> overflow_;
};

// A zeroed float32 buffer [rows, cols] from the step's arena, and its matrix view.
struct Buffer {
  Matrix m;
  Buffer() = default;
  Buffer(StepArena& arena, int64_t rows, int64_t cols) : m(arena.take(rows * cols), rows, cols) {}
  float* data() const { return m.data; }
};

// The layout of one step: sequence s owns rows [row0[s], row0[s] + rows[s]) at positions
// pos0[s] ... (its cache length before the step). Kept by the engine between steps (cleared, not
// freed), like `paged`, the paged views of the current layer that append_and_page() fills.
struct StepLayout {
  std::vector<KvCache*> caches;
  std::vector<int64_t> row0, rows, pos0;
  std::vector<int64_t> positions;    // [total_rows] absolute position of every row
  std::vector<PagedSequence> paged;  // [sequences]
  std::vector<int64_t> kv_slots;     // [total_rows] the current layer's cache slots
  KvBlockCopies kv_copies;           // the current layer's copy-on-write copies
  std::vector<ConvSequence> conv;    // [sequences] the current linear-attention layer's conv windows
  std::vector<DeltaSequence> delta;  // [sequences] and its delta-rule states
  // [sequences] where each sequence's step saves a snapshot of its recurrent state (an offset in its
  // rows, KvCache::plan_snapshot), 0 for none; filled by the engine before the layers run. Then, per
  // recurrent layer, conv / delta cover each sequence's rows up to its offset (all of them without
  // one), conv_rest / delta_rest the rows after it, and `snapshots` lists the sequences that save.
  std::vector<int64_t> snapshot_at;
  std::vector<ConvSequence> conv_rest;
  std::vector<DeltaSequence> delta_rest;
  std::vector<size_t> snapshots;
  // [total_rows, key_selection_cols] the sparse key selection of the step's last layer with an indexer,
  // which the layers sharing it (LayerSpec::shared_key_selection) attend to.
  std::vector<int32_t> key_selection;
  int64_t key_selection_cols = 0;
  int64_t total_rows = 0;
  // Where an indexer's top-k selection is a tie across its cut (indexer_topk's `ambiguous`): kept only
  // when the step's capture asks (ForwardCapture::want_selection_ties). selection_ties [total_rows] is
  // 1 where any layer's selection of that row tied, empty until an indexer ran; selection_flags() is
  // the span one indexer call writes and merge_selection_flags() folds it in.
  bool want_selection_ties = false;
  std::vector<uint8_t> selection_ties, layer_selection_ties;
  std::span<uint8_t> selection_flags() {
    if (!want_selection_ties) return {};
    layer_selection_ties.assign(static_cast<size_t>(total_rows), 0);
    return layer_selection_ties;
  }
  // Call after the backend synchronized (the flags are read on the host).
  void merge_selection_flags() {
    if (!want_selection_ties) return;
    selection_ties.resize(static_cast<size_t>(total_rows), 0);
    for (size_t r = 0; r < selection_ties.size(); ++r) selection_ties[r] |= layer_selection_ties[r];
  }
  void clear() {
    caches.clear();
    row0.clear();
    rows.clear();
    pos0.clear();
    positions.clear();
    paged.clear();
    kv_slots.clear();
    kv_copies.clear();
    conv.clear();
    delta.clear();
    snapshot_at.clear();
    conv_rest.clear();
    delta_rest.clear();
    snapshots.clear();
    key_selection.clear();
    key_selection_cols = 0;
    total_rows = 0;
    want_selection_ties = false;
    selection_ties.clear();
  }
};

struct Context {
  Backend& be;
  const ModelSpec& spec;  // this rank's part under tensor parallelism (Engine::local_spec())
  const EngineOptions& options;
  StepLayout& layout;
  const RopeFrequencies& rope;  // fixed frequencies (non-dynamic rope)
  StepArena& arena;
  dist::Communicator* tp = nullptr;  // the tensor-parallel group, or null in a single process
  dist::Communicator* ep = nullptr;  // the expert-parallel group, or null without EP
  // The group that sums partial MoE outputs (TP x EP of the stage), or null in a single process.
  dist::Communicator* moe = nullptr;
  ExpertPickCounts* picks = nullptr;              // counted here when the engine's options ask for it
  const RopeFrequencies* sliding_rope = nullptr;  // sliding layers' own frequencies (spec.sliding_rope)
  FiniteWatch* watch = nullptr;                   // the engine's finiteness record of the current layer
  // Each row computed as a one-token step computes it (MatmulArgs::row_invariant; attention one row at a
  // time): a verification step's logits are then those of feeding its tokens one by one.
  bool row_invariant = false;
  std::span<const int32_t> token_ids;  // [T] the step's input ids (a hash-routed MoE picks by them)
  bool bf16() const { return options.precision == ActivationPrecision::kBF16; }
  // Whether matmuls must be float32-exact (F32 precision) or may round activations (BF16).
  bool exact() const { return !bf16(); }
};

// Rounds every element to bfloat16 (round to nearest even) when the context runs in BF16.
void round_activations(const Context& c, Matrix m);
// Adds y's row means into the layer's finiteness record (Context::watch), when y has its rows. Called
// only where a kernel could drop a NaN instead of passing it on: the queries and keys attention takes
// (its running max skips NaN scores) and the router logits (top-k skips NaN). Elsewhere a NaN reaches
// the layer's output, which the engine reads anyway.
void watch_finite(const Context& c, ConstMatrix y);

// Binds each sequence's recurrent state of `layer` (Gated DeltaNet, Mamba-2) for this step: the conv
// windows into c.layout.conv, the float32 states into c.layout.delta (and the rows past a snapshot into
// conv_rest / delta_rest), each state advanced by the sequence's rows. Checks that every state holds
// exactly its sequence's tokens so far (`block` names the layer kind in the message). Returns the conv
// windows' element type.
KvDtype bind_recurrent_states(const Context& c, int64_t layer, std::string_view block);
// The conv kernel over every sequence's rows of the step (a.seqs is set here): the rows up to each
// snapshot first, then the snapshots' conv windows saved, then the rest. Without a snapshot in the step
// it is the one call it always was; the kernel's arithmetic is per token, so cutting a sequence's rows
// in two gives the same bits.
void recurrent_conv(const Context& c, int64_t layer, CausalConv1dArgs a);
// The state kernel (the gated delta rule, Mamba-2's scan) the same way, the snapshots' states saved
// between its two calls.
void recurrent_scan(const Context& c, int64_t layer, GatedDeltaRuleArgs a);
void recurrent_scan(const Context& c, int64_t layer, SsmScanArgs a);

// A scalar factor of the step as the family's code holds it: `value` as a float, rounded to bfloat16 first in
// BF16 precision when `rounded` (a buffer kept in the weights' dtype, e.g. an embedding scale).
float activation_scalar(const Context& c, double value, bool rounded);

// RMSNorm as the family computes it (BF16: cast before the weight, after it with norm_gain_f32).
void rms_norm(const Context& c, ConstMatrix x, std::span<const float> weight, float eps, Matrix y);
// A decoder norm (input, post-attention, final): the RMSNorm above, or with spec.layer_norm_decoder a
// LayerNorm without bias whose gain applies in float32 before the one cast.
void decoder_norm(const Context& c, ConstMatrix x, std::span<const float> weight, float eps, Matrix y);
// y = x W^T (+ bias), float32, not rounded; exact in F32 precision (MatmulArgs::exact), the backend's
// fast path (BF16-rounded activations allowed) in BF16 precision.
void matmul(const Context& c, ConstMatrix x, const Linear& w, Matrix y);
// y = x W^T (+ bias), rounded.
void linear(const Context& c, ConstMatrix x, const Linear& w, Matrix y);
// The output of a row-parallel projection (o_proj, down_proj) computed by matmul(): under tensor
// parallelism a partial sum, summed over the group (all-reduce), then rounded like linear().
void finish_row_parallel(const Context& c, Matrix y);

// Position-dependent attention temperature (ModelSpec::attn_temperature_tuning): each row of q [T, *]
// times 1 + attn_scale * ln(1 + floor((p + offset) / floor_scale)), then rounded.
void scale_q_by_temperature(const Context& c, Matrix q);

// RoPE frequencies for sequence s (recomputed for dynamic NTK scaling when it grows past M).
RopeFrequencies rope_for_sequence(const Context& c, int64_t s, int64_t rotary_dim);
// RoPE of every row of the step at its position, in place: one call, or one per sequence with dynamic
// scaling (its frequencies depend on the sequence's length).
// `layout` overrides the model's (the lightning indexer rotates in its own layout beside MLA).
// `freqs` overrides the model's frequencies (a sliding layer's own RoPE; not with dynamic scaling).
void rope_rows(const Context& c, Matrix x, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
               std::optional<RopeLayout> layout = std::nullopt, const RopeFrequencies* freqs = nullptr);
// Appends each sequence's rows of `first` / `second` [T, width] to its cache for `layer` and sets
// layout.paged to the caches' paged views of that layer (what the attention call reads).
void append_and_page(const Context& c, int64_t layer, ConstMatrix first, ConstMatrix second);
// Sets layout.paged to the caches' paged views of `layer` without appending (a layer that attends to an
// earlier layer's cache, LayerSpec::kv_source, after that layer appended the step's rows).
void page_layer(const Context& c, int64_t layer);

void gqa_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out);
void mla_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out);
// Shared key = value attention with low-rank queries (spec.shared_kv_low_rank) on a sliding-only, compressed
// sparse or heavily compressed layer (LayerSpec::kv_compress_ratio, compressed_sparse): the window's raw
// rows in the paged cache, the compressed entries and the compressor's partial window in the sequence's
// KvCache::compressed() state. shared_kv_attention_block.cpp says what it computes.
void shared_kv_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h,
                         Matrix out);
// Gated DeltaNet (linear attention) over each sequence's recurrent state of `layer`.
void gated_deltanet(const Context& c, int64_t layer, const LinearAttentionWeights& w, ConstMatrix h,
                    Matrix out);
// Mamba-2 over each sequence's recurrent state of `layer`.
void mamba2(const Context& c, int64_t layer, const MambaWeights& w, ConstMatrix h, Matrix out);
void dense_mlp(const Context& c, const DenseMlpWeights& w, ConstMatrix h, Matrix out);
// Per-layer inputs (spec.per_layer_input) of the step's tokens `ids`, whose scaled embeddings are `x`
// [T, H]: out [T, n_layers * P], layer l's in columns [l * P, (l + 1) * P).
void per_layer_inputs(const Context& c, const ModelWeights& w, std::span<const int32_t> ids, ConstMatrix x,
                      Matrix out);
// Layer `layer`'s per-layer input block on the residual stream x [T, H]:
// x += norm(W_proj (gelu_tanh(W_gate x) * inputs[:, layer's columns])), each step rounded.
void per_layer_input(const Context& c, int64_t layer, const PerLayerInputWeights& w, ConstMatrix inputs,
                     Matrix x);
void moe(const Context& c, int64_t layer, const MoeWeights& w, ConstMatrix h, Matrix out);
// A dense MLP beside the MoE (spec.dense_mlp_beside_moe) of residual stream x [T, H] whose pre-FFN norm is
// h [T, H]: out [T, H] = norm(mlp(h)) + norm(moe(x)), the experts reading moe_in_norm(x), rounded.
void dense_mlp_beside_moe(const Context& c, int64_t layer, const LayerWeights& w, ConstMatrix x,
                          ConstMatrix h, Matrix out);

// Hyper-connections (spec.hyper_connections, n streams; docs/ops.md). A block's input from the streams
// [T, n H] with weights `w`: out [T, H] = sum_j pre_j stream_j (rounded), and the mixes that spread its
// output back, post [T, n] and comb [T, n n].
void hc_collapse(const Context& c, const HyperConnectionWeights& w, ConstMatrix streams, Matrix post,
                 Matrix comb, Matrix out);
// streams [T, n H] = post_k x + sum_j comb[j, k] stream_j for the block output x [T, H], in place.
void hc_expand(const Context& c, ConstMatrix x, ConstMatrix post, ConstMatrix comb, Matrix streams);
// The model's last collapse of the streams [T, n H] into out [T, H], before the final norm.
void hc_head(const Context& c, const HyperConnectionWeights& w, ConstMatrix streams, Matrix out);

}  // namespace day0::blocks
