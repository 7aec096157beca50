#pragma once
// The weights of one model bound to the engine's blocks: WeightViews over the checkpoint's bytes (never
// expanded, kernels dequantise on the fly) plus small float32 vectors (norms, biases, sinks) converted
// once. bind_model_weights() fills it from the family's weight table (model/weight_table.h).
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/dist/expert_load.h"
#include "day0/model/model_spec.h"
#include "day0/ops/kernel_args.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {

// The part of the model one tensor-parallel rank holds: rank `rank` of `size`. Each tensor is split
// by its weight-table shard rule (model/weight_table.h): column tensors by output rows (whole heads,
// FFN columns), row tensors by input columns, vocabulary tensors by rows; replicated ones whole.
struct TensorShard {
  int rank = 0;
  int size = 1;
  bool whole() const { return size == 1; }
};

// The experts one expert-parallel rank holds: EP rank `rank` of `size` binds only the routed experts
// of its block (dist/expert_placement.h: contiguous balanced blocks); everything else (attention,
// routers, shared experts, dense layers, norms, embedding, LM head) is replicated over the EP ranks, or
// split by its TensorShard within the TP group.
// With redundant experts (`placement`, dist/expert_load.h) a rank binds its block plus its replicas;
// without one, the blocks alone.
struct ExpertShard {
  int rank = 0;
  int size = 1;
  std::shared_ptr<const dist::ExpertPlacement> placement;  // null: contiguous blocks, no copies
  bool whole() const { return size == 1; }
};

// The decoder layers one pipeline stage runs: stage `stage` of `size` (dist/pipeline_stages.h: contiguous
// balanced blocks by layer count). It binds only those layers' weights, the embedding when it is the
// first stage, the final norm and the LM head when it is the last; the other layers' LayerWeights stay
// empty.
struct PipelineStage {
  int stage = 0;
  int size = 1;
  bool whole() const { return size == 1; }
  bool first() const { return stage == 0; }
  bool last() const { return stage == size - 1; }
};

// Rows [begin, end) of a dimension of `n` elements that rank `shard.rank` holds under an even split
// (`n` a multiple of the size); the vocabulary split rounds the share up (the last rank may hold fewer
// rows, or none).
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
ShardRange even_shard(int64_t n, TensorShard shard);
ShardRange vocab_shard(int64_t vocab, TensorShard shard);
int64_t vocab_shard_rows(int64_t vocab, TensorShard shard);  // ceil(vocab / size): every rank's padded share
// The rows of a K/V projection [n_kv_heads * head_dim, ...] rank `shard.rank` holds: its KV heads, or
// the one its query heads read when there are fewer KV heads than ranks.
ShardRange kv_head_shard(int64_t rows, int64_t n_kv_heads, TensorShard shard);

// Whether `spec` can run tensor-parallel over `tp` ranks: InvalidArgument / Unsupported saying what
// does not divide or is not split yet. Attention splits by heads (MLA's q_b / kv_b / o_proj too, its
// down projections and latent whole on every rank); MoE layers split every routed expert's width
// (expert-TP, stacked experts likewise) and the shared expert's like a dense FFN.
Status check_tensor_parallel(const ModelSpec& spec, int tp);
// The spec one rank's blocks compute with: its heads, KV heads, FFN columns and expert widths.
ModelSpec tensor_parallel_spec(const ModelSpec& spec, TensorShard shard);
// Whether `spec` can run expert-parallel over `ep` ranks: InvalidArgument for a model without routed
// experts or with fewer experts than ranks.
Status check_expert_parallel(const ModelSpec& spec, int ep);

// Whether `spec` can run over `pp` pipeline stages: InvalidArgument when a stage would hold no layer,
// Unsupported ("not yet") for layer pairs (shortcut MoE) and linear-attention layers, whose state a
// stage boundary would cut or every stage's cache would hold.
Status check_pipeline_parallel(const ModelSpec& spec, int pp);

// Weight bytes a rank bound (views and copies of the checkpoint's bytes, in its dtypes).
struct BoundWeightBytes {
  uint64_t split = 0;       // tensors split over the ranks (column, row, vocabulary, expert)
  uint64_t replicated = 0;  // tensors every rank holds whole (norms, routers, biases)
  uint64_t experts = 0;     // the routed experts' part of `split` (this rank's experts under EP)
  uint64_t total() const { return split + replicated; }
};

struct Linear {
  WeightView w;                 // [out, in]
  const float* bias = nullptr;  // [out] or null
  bool present() const { return w.data != nullptr; }
};

// A compressed KV layer's learned pooling (CompressedKvSpec): kv / gate [C, H] (C the entry width, twice it
// where windows overlap), position_bias [ratio, C], norm [entry width] (the pooled entry's RMSNorm gain).
struct CompressorWeights {
  Linear kv, gate;
  std::span<const float> position_bias, norm;
  bool present() const { return kv.present(); }
};

struct AttentionWeights {
  // GQA.
  Linear q, k, v, o;
  std::span<const float> q_norm, k_norm;  // [head_dim] (qk_norm) or empty
  std::span<const float> sinks;           // [n_heads] (attention_sinks) or empty
  Linear gate;  // the output gate's projection (spec.output_gate): [n_heads (* head_dim), H], or absent
  // MLA.
  Linear q_a, q_b, kv_a, kv_b;                 // q_a/q_b absent without q_lora_rank (then q is used)
  std::span<const float> q_a_norm, kv_a_norm;  // [q_lora_rank], [kv_lora_rank]
  // Lightning indexer: wq_b [n_I * d_I, q_lora_rank], wk [d_I, H], weights_proj [n_I, H].
  Linear index_q, index_k, index_weights;
  std::span<const float> index_k_norm, index_k_norm_bias;  // [d_I] LayerNorm weight and bias
  // Block-sparse attention's indexer: index_q [n_I * d_I, H], index_k [d_I, H], and its per-head
  // RMSNorm gains of q (here) and k (index_k_norm).
  std::span<const float> index_q_norm;  // [d_I]
  // Shared key = value attention (spec.shared_kv_low_rank; queries from q_a, q_a_norm, q_b above): the
  // key = value head kv [head_dim, H] and its norm kv_norm [head_dim]; the grouped output projection
  // o_a [groups * o_rank, heads * head_dim / groups], then o_b [H, groups * o_rank].
  Linear kv, o_a, o_b;
  std::span<const float> kv_norm;
  // Compressed layers: the entries' compressor; compressed sparse layers also the indexer's (index_q
  // [n_I * d_I, q_lora_rank] and index_weights [n_I, H] above).
  CompressorWeights compressor, index_compressor;
};

// Gated DeltaNet: in_qkvz [2 n_k d_k + 2 n_v d_v, H] and in_ba [2 n_v, H] grouped per key
// head, or the separate projections: in_q / in_k [n_k d_k, H] and in_v [n_v d_v, H]
// (row views of one in_proj_qkv), in_z [n_v d_v, H], in_b / in_a [n_v, H]; conv [C * K] (C = 2 n_k d_k +
// n_v d_v channels [q | k | v], K taps each), a_log / dt_bias [n_v], norm [d_v] (the gated RMSNorm's plain
// gain), out [H, n_v d_v].
struct LinearAttentionWeights {
  Linear in_qkvz, in_ba, out;
  Linear in_q, in_k, in_v, in_z, in_b, in_a;
  std::span<const float> conv, a_log, dt_bias, norm;
  bool separate() const { return in_q.present(); }
  bool present() const { return in_qkvz.present() || separate(); }
};

// Mamba-2: in [I + C + n_heads, H] giving [z | x B C | dt], conv [C * K] and conv_bias [C] (or empty),
// dt_bias / a_log / d [n_heads], norm [I] (the grouped gated RMSNorm's gain), out [H, I].
struct MambaWeights {
  Linear in, out;
  std::span<const float> conv, conv_bias, dt_bias, a_log, d, norm;
  bool present() const { return in.present(); }
};

struct DenseMlpWeights {
  Linear gate, up, down;
  bool present() const { return down.present(); }
};

struct MoeWeights {
  Linear router;                           // [E, H] (+ bias with router_bias)
  std::span<const float> correction_bias;  // [E] (noaux_tc) or empty
  std::vector<ExpertWeights> experts;      // [slots held]: the experts held_experts names (all E unless EP)
  // Expert parallelism (empty in one process: `experts` is every expert in order):
  std::vector<int32_t> held_experts;  // [slots held] the logical expert of each slot
  std::vector<int32_t> expert_slot;   // [E] each expert's slot here, -1 where another rank holds it
  // The layer's placement over the EP ranks (dispatch among copies), or null in one process.
  std::shared_ptr<const dist::LayerExpertPlacement> placement;
  int64_t expert_of_slot(int64_t slot) const {
    return held_experts.empty() ? slot : held_experts[static_cast<size_t>(slot)];
  }
  // The slot holding routed expert `id` (in [0, E)), or -1 where another rank holds it.
  int64_t slot_of(int64_t id) const {
    return expert_slot.empty() ? id : expert_slot[static_cast<size_t>(id)];
  }
  GateUpLayout layout = GateUpLayout::kSeparate;
  DenseMlpWeights shared;        // shared expert(s) as one SwiGLU, or absent
  Linear shared_gate;            // the shared expert's sigmoid gate [1, H], or absent
  Linear latent_in, latent_out;  // latent MoE: [latent, H] before the experts, [H, latent] after, or absent
  std::span<const float> router_input_scale;  // [H] (MoeSpec::router_input_norm), or empty
  std::span<const float> expert_scale;        // [E] (MoeSpec::per_expert_scale), or empty
  // [vocab, top_k] a hash-routed layer's token id -> experts (LayerSpec::hash_routed), or empty.
  MatrixView<const int32_t> hash_table;
};

// One hyper-connection's weights (ModelSpec::hyper_connections, n streams): the projection of the normed
// streams fn [(2 + n) n, n H] ([n, n H] for the head), base [(2 + n) n] ([n]) and scale [3] ([1]).
struct HyperConnectionWeights {
  Linear fn;
  std::span<const float> base, scale;
  bool present() const { return fn.present() && !base.empty() && !scale.empty(); }
};

// A layer's per-layer input block (ModelSpec::per_layer_input): gate [P, H], projection [H, P], norm [H].
struct PerLayerInputWeights {
  Linear gate, projection;
  std::span<const float> norm;
  bool present() const { return gate.present(); }
};

struct LayerWeights {
  std::span<const float> input_norm, post_norm;        // [H]
  std::span<const float> attn_out_norm, ffn_out_norm;  // [H] sandwich norms (spec.sandwich_norms), or empty
  AttentionWeights attn;
  LinearAttentionWeights linear;        // linear-attention layers (Gated DeltaNet)
  MambaWeights mamba;                   // Mamba-2 layers
  DenseMlpWeights mlp;                  // dense layers
  MoeWeights moe;                       // MoE layers
  PerLayerInputWeights per_layer;       // per-layer inputs (spec.per_layer_input), or absent
  std::span<const float> layer_scalar;  // [1] (spec.layer_scalar), or empty
  // [H] each, spec.dense_mlp_beside_moe: the experts' input norm, the dense MLP's and the MoE's output norms.
  std::span<const float> moe_in_norm, dense_out_norm, moe_out_norm;
  HyperConnectionWeights attn_hc, ffn_hc;  // spec.hyper_connections: before the mixer, before the FFN
};

// What the binder kept as INT8 / INT4 (the integer kernels' share of the model), for `run` to print.
struct IntProjections {
  int64_t n = 0;
  int64_t n_int8 = 0, n_int4 = 0;  // an INT4 model may carry an INT8 LM head (day0 quantize --head int8)
  uint64_t bytes = 0;              // codes + scales + zero points
  WeightFormat format = WeightFormat::kInt8;
  int64_t group = 0;  // of the last one counted (one quantization config per checkpoint)
  bool asymmetric = false;
  void count(const WeightView& w);
  std::string label() const;  // "int4 g128 x int8 activations (210 projections)", "" when none
};

// What turns the main model's hidden state and the next token into a multi-token-prediction layer's input:
// eh_proj([enorm(embedding) | hnorm(hidden)]) (DeepSeek-V3's layout), or with hyper-connections (DeepSeek-V4)
// e_proj(enorm(embedding)) + h_proj(hnorm(stream j)) for each of the main model's streams j.
struct MtpInputWeights {
  std::span<const float> embedding_norm, hidden_norm;  // enorm, hnorm [H]
  Linear projection;                                   // eh_proj [H, 2H], or absent
  Linear embedding_projection, hidden_projection;      // e_proj, h_proj [H, H], or absent
  bool present() const { return projection.present() || hidden_projection.present(); }
};

struct ModelWeights {
  WeightView embedding;  // [V, H]
  Linear lm_head;        // [V, H] (the embedding when tied)
  std::span<const float> final_norm;
  // Per-layer inputs (spec.per_layer_input): the token-identity table [V_p, n_layers * P] (rows gathered from
  // the checkpoint), the embeddings' projection [n_layers * P, H] and its norm [P].
  WeightView per_layer_embedding;
  Linear per_layer_model_projection;
  std::span<const float> per_layer_projection_norm;
  HyperConnectionWeights hc_head;  // spec.hyper_connections: the streams' final collapse, or absent
  std::vector<LayerWeights> layers;
  // The checkpoint's multi-token-prediction layers (spec.n_mtp_layers), bound only when asked
  // (bind_model_weights' mtp_layers): each a one-layer model whose `layers[0]` is the MTP decoder layer,
  // `embedding` / `lm_head` its own embed_tokens / shared_head.head (the main model's where it stores none),
  // `final_norm` its shared_head.norm and `mtp_input` its input; empty otherwise.
  std::vector<std::shared_ptr<ModelWeights>> mtp;
  // Present only in an MTP layer's weights.
  MtpInputWeights mtp_input;
  TensorShard shard;         // what this process holds (whole unless tensor-parallel)
  ExpertShard expert_shard;  // whose routed experts it holds (all unless expert-parallel)
  PipelineStage stage;       // which pipeline stage's layers it holds (all unless pipeline-parallel)
  ShardRange held_layers;    // decoder layers bound: [0, n_layers) unless pipeline-parallel
  ShardRange vocab;          // rows of the embedding and the LM head held: [0, V) unless split
  BoundWeightBytes bound;    // bytes bound, for reports and the tests of sharded loading

  // Storage for converted data (norms and biases in float32, transposed expert weights); a deque so
  // that spans handed out stay valid as it grows.
  std::deque<std::vector<float>> f32_store;
  std::deque<std::vector<uint8_t>> byte_store;
  std::deque<std::vector<int32_t>> index_store;  // integer tables converted to int32 (tid2eid)
  std::deque<std::string> name_store;            // the tensor names WeightView::name points into
  // The source whose bytes the WeightViews point into; kept alive with the weights.
  std::shared_ptr<const TensorSource> source;
  IntProjections int_projections;
};

// Binds Hugging Face names to views, checking shapes against the spec; every error names the tensor.
class WeightBinder {
 public:
  WeightBinder(const ModelSpec& spec, ModelWeights& out) : spec_(spec), out_(out) {}

  bool has(const std::string& name) const { return out_.source->contains(name); }
  // A projection [rows, cols]: BF16/F16/F32, F8_E4M3 with its `<name>_scale_inv` sibling, or INT8 /
  // INT4 when the source keeps it quantized (TensorSource::int_weight).
  Result<Linear> linear(const std::string& name, int64_t rows, int64_t cols, bool with_bias = false);
  // Rows `r` and columns `c` of a projection stored [rows, cols] (BF16/F16/F32, or F8_E4M3 with its
  // scale grid re-blocked for the part): a view of whole rows, a copy of a column range (only those
  // bytes of the checkpoint are read).
  Result<Linear> linear_part(const std::string& name, int64_t rows, int64_t cols, ShardRange r, ShardRange c);
  // Elements `part` of a vector of n elements, as float32.
  Result<std::span<const float>> vector_part(const std::string& name, int64_t n, ShardRange part);
  // Bytes of the checkpoint bound so far (views and copies).
  uint64_t bytes_bound() const { return bytes_bound_; }
  // A float32 copy of a vector (norm weight, bias, sinks) of n elements, any float dtype.
  Result<std::span<const float>> vector(const std::string& name, int64_t n);
  // An integer table [rows, cols] (I64 or I32) as int32, every entry checked to lie in [0, limit) (over a
  // shape-only source: zeros).
  Result<MatrixView<const int32_t>> index_table(const std::string& name, int64_t rows, int64_t cols,
                                                int64_t limit);
  // A float32 copy of a small tensor of exactly `shape` (a depthwise conv weight [C, 1, K]), flattened.
  Result<std::span<const float>> flat(const std::string& name, std::vector<int64_t> shape);
  // The same, only the runs `rows` of its first dimension, concatenated in order.
  Result<std::span<const float>> flat_rows(const std::string& name, std::vector<int64_t> shape,
                                           std::span<const ShardRange> rows);
  // `head` followed by flat_rows(name, shape, rows): a depthwise conv whose channel groups are stored as
  // separate tensors (q_conv1d / k_conv1d / v_conv1d), bound group by group.
  Result<std::span<const float>> append_rows(std::span<const float> head, const std::string& name,
                                             std::vector<int64_t> shape, std::span<const ShardRange> rows);
  // 1 + w for a zero-centred norm's stored offset w (over a shape-only source: `w` itself, unread).
  std::span<const float> plus_one(std::span<const float> w);
  // Expert e of a stacked tensor [E, rows, cols] (BF16/F32), as a view.
  Result<WeightView> stacked(const std::string& name, int64_t e, int64_t n_experts, int64_t rows,
                             int64_t cols);
  // Rows `row_parts` (concatenated in order) and columns `col_part` of it: a view when they are the
  // whole expert, else a copy of those elements (expert-TP).
  Result<WeightView> stacked_part(const std::string& name, int64_t e, int64_t n_experts, int64_t rows,
                                  int64_t cols, std::span<const ShardRange> row_parts, ShardRange col_part);
  // Expert e of a stacked tensor stored [E, cols, rows] (x @ W orientation): transposed copy.
  Result<WeightView> stacked_transposed(const std::string& name, int64_t e, int64_t n_experts, int64_t rows,
                                        int64_t cols);
  // The same, rows `row_parts` (concatenated in order: the gate and up halves of a concatenated
  // gate_up) and columns `col_part` of the expert's [rows, cols] (expert-TP): a copy of those bytes.
  Result<WeightView> stacked_transposed_part(const std::string& name, int64_t e, int64_t n_experts,
                                             int64_t rows, int64_t cols,
                                             std::span<const ShardRange> row_parts, ShardRange col_part);
  // MXFP4 expert e: `<prefix>_blocks` [E, rows, cols/32, 16] and `<prefix>_scales` [E, rows,
  // cols/32].
  // An FP4 projection [rows, cols] (FP4 routed experts): `name` I8 [rows, cols / 2] nibbles and
  // its `weight_scale_inv` E8M0 [rows, cols / group], group 32 or 16 read off the scale grid.
  // Where the spec has NVFP4 projections (spec.weights.nvfp4): nvfp4_linear's tensors instead.
  Result<Linear> fp4_linear(const std::string& name, int64_t rows, int64_t cols);
  // An NVFP4 projection [rows, cols] whose values tensor is `name` (Nvfp4Layout names the others).
  Result<Linear> nvfp4_linear(const std::string& name, int64_t rows, int64_t cols);
  // Rows `r` and columns `c` of it (expert-TP): a view of whole rows, a copy of whole scale groups; a
  // split inside a group is refused.
  Result<Linear> fp4_linear_part(const std::string& name, int64_t rows, int64_t cols, ShardRange r,
                                 ShardRange c);
  Result<WeightView> mxfp4(const std::string& prefix, int64_t e, int64_t n_experts, int64_t rows,
                           int64_t cols);
  // Rows `r` and columns `c` of it (expert-TP): a view of whole rows, a copy of whole 32-column groups,
  // or a BF16 copy (exact) of a column range that splits a group.
  Result<WeightView> mxfp4_part(const std::string& prefix, int64_t e, int64_t n_experts, int64_t rows,
                                int64_t cols, ShardRange r, ShardRange c);
  // Row e of a stacked bias [E, n] as float32.
  Result<const float*> stacked_vector(const std::string& name, int64_t e, int64_t n_experts, int64_t n);
  // Elements `parts` of it, concatenated, as float32.
  Result<const float*> stacked_vector_part(const std::string& name, int64_t e, int64_t n_experts, int64_t n,
                                           std::span<const ShardRange> parts);

  const ModelSpec& spec() const { return spec_; }
  ModelWeights& out() { return out_; }

 private:
  Result<RawTensor> expect(const std::string& name, std::vector<int64_t> shape);
  // The block scales of part (r, c) of FP8 weight `name` [rows, cols] into `w` (format, block shape,
  // a float32 grid of its own); counts the grid's bytes.
  Status fp8_part_scales(const std::string& name, int64_t rows, int64_t cols, ShardRange r, ShardRange c,
                         WeightView& w);
  // Elements [offset, offset + n) of a float tensor as float32 (a converted copy; over a shape-only
  // source a view of its unreadable bytes).
  Result<std::span<const float>> floats(const RawTensor& t, int64_t offset, int64_t n);
  // FP8 block scales (float, or E8M0 exponent bytes) as float32 multipliers.
  Result<std::span<const float>> fp8_scales(const RawTensor& t);
  std::string_view keep_name(const std::string& name);  // a copy that lives as long as the weights
  const ModelSpec& spec_;
  ModelWeights& out_;
  uint64_t bytes_bound_ = 0;
};

// Binds every tensor of `spec` from `source`, driven by the family's weight table (the tensor
// manifest): each tensor's slot says where it goes; MTP layers are skipped unless `mtp_layers` (then bound
// into ModelWeights::mtp; in one process only: Unsupported with a TP / EP / PP shard). With a tensor-parallel
// `shard` only that rank's part of every tensor is bound (check_tensor_parallel() must pass); with an
// expert-parallel `experts` shard only that rank's routed experts are (the others are never read;
// check_expert_parallel() must pass); with a pipeline `stage` only that stage's layers, and the
// embedding / final norm + LM head where the stage owns them (the others are never read;
// check_pipeline_parallel() must pass).
Result<std::shared_ptr<ModelWeights>> bind_model_weights(const ModelSpec& spec,
                                                         std::shared_ptr<const TensorSource> source,
                                                         TensorShard shard = {}, ExpertShard experts = {},
                                                         PipelineStage stage = {}, bool mtp_layers = false);

}  // namespace day0
