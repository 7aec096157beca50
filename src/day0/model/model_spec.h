#pragma once
// ModelSpec: a Hugging Face config.json parsed, validated and with every default the reference
// implementation (transformers) derives made explicit. Everything downstream (tensor manifest,
// operator list, planner, synth, forward pass) reads this struct, never the JSON.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/core/status.h"

namespace day0 {

enum class AttentionKind { kGqa, kMla };
// Mask of one layer's attention.
enum class AttentionMask { kCausal, kSliding, kChunked };
enum class RopeLayout { kHalfSplit, kInterleaved };
enum class RopeType { kNone, kDefault, kLinear, kDynamic, kLlama3, kYarn, kProportional };
// kSqrtSoftplus: sqrt(softplus(logit)) per expert (DeepSeek-V4's `sqrtsoftplus`), top-k renormalised.
enum class RouterScoring { kSoftmax, kSigmoid, kSqrtSoftplus };
enum class TopkMethod {
  kGreedy,              // top-k of the scores, no groups
  kGroupLimitedGreedy,  // group max, keep topk_group groups
  kNoauxTc,             // + correction bias, top-2-sum groups
  kLogitsThenSoftmax,   // top-k on logits, softmax over the selected
  kLogitsThenSigmoid,   // top-k on logits, sigmoid of the selected, input scaling
};
// How the release stores the big projection weights.
// kInt8 / kInt4 are integer weights kept quantized in memory (per-group scales, optional zero points),
// bound from pack-quantized / GPTQ / AWQ checkpoints (ops/tensor.h has the layout).
enum class WeightFormat { kBF16, kF16, kF32, kFp8Block, kMxfp4, kInt8, kInt4 };

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  int64_t original_max_position = 0;       // llama3 / yarn (0 = max_position_embeddings)
  double beta_fast = 32.0;                 // yarn
  double beta_slow = 1.0;                  // yarn
  double mscale = 0.0;                     // yarn: the attention factor as an mscale ratio
  double mscale_all_dim = 0.0;             // yarn: the ratio's divisor (and the MLA scale)
  std::optional<double> attention_factor;  // yarn explicit override
  bool truncate = true;                    // yarn
  // proportional: frequencies over the whole head (f_i = theta^(-2i / d), divided by `factor`), of which only
  // the first int(share * d / 2) rotate and the rest are 0 (the pairs pass through); the spec's
  // partial_rotary_factor is then 1 and this holds the config's partial_rotary_factor.
  double proportional_share = 1.0;
  bool operator==(const RopeScaling&) const = default;
};

struct MlaSpec {
  int64_t q_lora_rank = 0;  // 0: no query compression (q_proj directly)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // LoRA rescaling (mla_scale_q_lora / mla_scale_kv_lora): q (after q_b_proj) times q_scale, the normed
  // latent c_kv times latent_scale (sqrt(hidden / q_lora_rank), sqrt(hidden / kv_lora_rank)); 1 elsewhere.
  double q_scale = 1.0;
  double latent_scale = 1.0;
  bool operator==(const MlaSpec&) const = default;
};

// Sparse attention's lightning indexer: every layer scores its cached tokens
// with n_heads small heads over an own key (index_head_dim, cached beside the MLA latent) and lets
// MLA attend to the top `topk` of them only.
struct IndexerSpec {
  int64_t n_heads = 0;   // index_n_heads
  int64_t head_dim = 0;  // index_head_dim (RoPE on its first qk_rope_head_dim dims)
  int64_t topk = 0;      // index_topk
  // How the indexer rotates its rope part: half-split (DeepSeek-V3.2, beside interleaved MLA) or
  // interleaved (GLM-5), the family's code, not a config key.
  RopeLayout rope_layout = RopeLayout::kHalfSplit;
  bool operator==(const IndexerSpec&) const = default;
};

// Block-sparse attention: on LayerSpec::block_sparse layers an indexer of n_heads heads (its own q / k
// projections and per-head RMSNorms, the model's RoPE on its first rotary dims) scores every visible key
// against one index key per token (cached after V in the same rows), takes each block of block_size keys
// at its best score, and the query heads of index head i (n_heads / this n_heads of them: a KV group when
// the counts agree) attend only to the keys of its top topk_blocks blocks; the local_blocks blocks ending
// at the query's own always win.
struct BlockIndexerSpec {
  int64_t n_heads = 0;       // index_n_heads
  int64_t head_dim = 0;      // index_head_dim
  int64_t block_size = 0;    // index_block_size
  int64_t topk_blocks = 0;   // index_topk_blocks
  int64_t local_blocks = 0;  // index_local_blocks
  bool operator==(const BlockIndexerSpec&) const = default;
};

// Gated DeltaNet linear attention (layer_types "linear_attention"): in_proj_qkvz / in_proj_ba grouped
// per key head, a causal depthwise conv of `conv_kernel` over [q | k | v] with silu, L2-normed q / k, the
// gated delta rule over a float32 state of n_value_heads x key_head_dim x value_head_dim per sequence,
// and a gated RMSNorm (silu(z)) per value head. Value head j reads key head j / (n_value / n_key).
struct LinearAttentionSpec {
  int64_t n_key_heads = 0;     // linear_num_key_heads
  int64_t n_value_heads = 0;   // linear_num_value_heads (a multiple of n_key_heads)
  int64_t key_head_dim = 0;    // linear_key_head_dim
  int64_t value_head_dim = 0;  // linear_value_head_dim
  int64_t conv_kernel = 0;     // linear_conv_kernel_dim
  double beta_scale = 1.0;     // beta = scale * sigmoid(b) (OLMo-Hybrid's linear_allow_neg_eigval: 2)
  double norm_eps = 0.0;       // the gated RMSNorm's eps; 0: rms_norm_eps
  int64_t key_dim() const { return n_key_heads * key_head_dim; }
  int64_t value_dim() const { return n_value_heads * value_head_dim; }
  int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }  // [q | k | v]
  bool operator==(const LinearAttentionSpec&) const = default;
};

// Mamba-2 (Nemotron-H's "mamba" / "linear_attention" layers): in_proj gives [z | x B C | dt]; a causal
// depthwise conv (with bias) and silu over x B C; the selective scan over a float32 state of n_heads x
// head_dim x state_size per sequence, with dt = softplus(dt + dt_bias) (time_step_limit [0, inf) only),
// A = -exp(A_log) and the D skip; then y * silu(z), an RMSNorm per group of intermediate / n_groups
// channels, out_proj. Head h reads B and C of group h / (n_heads / n_groups).
struct MambaSpec {
  int64_t n_heads = 0;      // mamba_num_heads
  int64_t head_dim = 0;     // mamba_head_dim
  int64_t n_groups = 0;     // n_groups
  int64_t state_size = 0;   // ssm_state_size
  int64_t conv_kernel = 0;  // conv_kernel
  int64_t chunk_size = 0;   // chunk_size: transformers' prefill chunks (the sums are the same unchunked)
  bool conv_bias = true;    // use_conv_bias
  // The multi-token-prediction layers the release stores (num_nextn_predict_layers, their kinds): not
  // run by plain decoding, kept so that the config writes back.
  int64_t mtp_layers = 0;
  std::vector<std::string> mtp_layer_types;
  int64_t intermediate() const { return n_heads * head_dim; }
  int64_t conv_channels() const { return intermediate() + 2 * n_groups * state_size; }  // [x | B | C]
  bool operator==(const MambaSpec&) const = default;
};

// RoPE of one kind of layer when it differs from the model's (rope_parameters keyed by layer type).
struct LayerRope {
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  RopeScaling scaling;
  bool operator==(const LayerRope&) const = default;
};

// Compressed KV attention: on a layer with LayerSpec::kv_compress_ratio m > 0, a learned compressor pools
// every m source tokens into one compressed KV entry (a softmax over the window's gate logits plus a
// learned position bias, the gated sum RMS-normed, RoPE'd at the window's first position with `rope`);
// the layer attends to its sliding window of raw keys plus those entries. Sparse layers
// (LayerSpec::compressed_sparse) pool overlapping windows of 2m (two series of projections) and a
// lightning indexer of index_n_heads x index_head_dim (its own compressor over the same windows, queries
// from the q-LoRA latent) keeps each query's index_topk best entries (scores ReLU'd, so they can tie at
// 0); heavy layers attend to every entry. Each entry is cached (head_dim, plus index_head_dim on sparse
// layers) beside the window's raw rows.
struct CompressedKvSpec {
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  LayerRope rope;  // the compressed layers' RoPE (compress_rope_theta, YaRN); sliding layers use the model's
  bool operator==(const CompressedKvSpec&) const = default;
};

// Hyper-connections (manifold-constrained): the residual is `streams` parallel copies of the hidden state.
// Before each attention and FFN block a float32 projection of the RMS-normed, flattened streams
// [streams * H] gives per token `pre` (sigmoid, + eps: the weights that collapse the streams into the
// block's input), `post` (2 * sigmoid: how the block's output is spread back over the streams) and
// `comb` [streams x streams] (softmax + eps, then sinkhorn_iters alternating column / row normalisations
// towards a doubly-stochastic matrix) mixing the incoming streams into the outgoing ones; each output
// has a learned scale and bias. A final head collapses the streams before the model's norm.
struct HyperConnectionSpec {
  int64_t streams = 0;                                           // hc_mult
  int64_t sinkhorn_iters = 0;                                    // hc_sinkhorn_iters
  double eps = 0.0;                                              // hc_eps
  int64_t mix_width() const { return (2 + streams) * streams; }  // [pre | post | comb] per token
  bool operator==(const HyperConnectionSpec&) const = default;
};

// Low-rank queries with one shared key = value head (DeepSeek-V4's attention, carried by a GQA layer with
// one KV head): q = weightless-RMSNorm per head of q_b(RMSNorm(q_a(x))) [heads x head_dim, from a latent of
// q_lora_rank]; the single kv head is RMSNorm(kv(x)) and serves as key and value, RoPE'd on its last
// rotary dims (interleaved pairs), so the attention output's rotary dims are rotated back by the query's
// position. The heads' outputs go through a grouped low-rank projection: `out_groups` groups of heads, each
// projected to out_rank by its own block (o_a [groups * out_rank, heads * head_dim / groups]), then
// o_b [H, groups * out_rank].
struct SharedKvLowRankAttentionSpec {
  int64_t q_lora_rank = 0;
  int64_t out_groups = 0;  // o_groups
  int64_t out_rank = 0;    // o_lora_rank
  bool operator==(const SharedKvLowRankAttentionSpec&) const = default;
};

// Why `tp` tensor-parallel ranks cannot split a grouped output projection of `out_groups` groups, "" when
// they can: each rank holds whole groups of heads (its groups' rows of o_a, their columns of o_b). The one
// test the engine, the distributed loader and the planner share.
std::string output_groups_split_problem(int64_t out_groups, int64_t tp);

struct MoeSpec {
  int64_t n_experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_intermediate = 0;  // moe_intermediate_size (in some configs intermediate_size)
  int64_t n_shared_experts = 0;     // shared SwiGLU of n_shared * width
  int64_t shared_intermediate = 0;  // width of the shared expert MLP (0 = none)
  bool shared_expert_gate = false;  // sigmoid(x . w) gates the shared expert
  RouterScoring scoring = RouterScoring::kSoftmax;
  TopkMethod topk_method = TopkMethod::kGreedy;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  bool correction_bias = false;  // e_score_correction_bias (selection only)
  bool router_bias = false;      // router bias
  bool expert_bias = false;      // expert biases
  double swiglu_limit = 0.0;     // clamped SwiGLU's limit (7.0); 0 = plain SwiGLU
  double swiglu_alpha = 1.702;   // clamped SwiGLU's sigmoid slope
  // With swiglu_limit: silu(min(gate, limit)) * clamp(up, -limit, limit) in the routed and the shared
  // experts (DeepSeek-V4), instead of gpt-oss's (clamp(up) + 1) * g * sigmoid(alpha * g).
  bool swiglu_plain_clamp = false;
  // Router logits soft-capped before scoring: c * tanh(z / c) in float32 (0: none).
  double router_logit_softcap = 0.0;
  // Zero-computation experts: the router scores n_experts + n_zero_experts; a pick at or
  // past n_experts returns its input (times its weight), so a token uses 0 ... top-k real experts.
  int64_t n_zero_experts = 0;
  // Latent MoE (Nemotron-H's moe_latent_size): the routed experts read fc1_latent_proj(x) [latent] and
  // their sum goes through fc2_latent_proj back to hidden; the router and shared expert read x. 0: none.
  int64_t latent_size = 0;
  // Share of the top-k picks that go to real experts on average, for planning (1 without zero
  // experts; else the release's published average, e.g. 2/3 for ~27B activated).
  double mean_real_expert_share = 1.0;
  // With a shared expert, (routed + shared) x this: 0.5 averages the two (Cohere2-MoE's "average"). A
  // power of two, so that scaling the rounded sum rounds as scaling the exact one.
  double shared_combine_scale = 1.0;
  // The router reads its own weightless RMSNorm of the input, times a stored gain [H] and 1 / sqrt(H)
  // (MoeWeights::router_input_scale), each product rounded.
  bool router_input_norm = false;
  // After the top-k (and its normalization) each weight is multiplied by its expert's stored scale [E]
  // (MoeWeights::expert_scale).
  bool per_expert_scale = false;
  bool operator==(const MoeSpec&) const = default;
};

struct LayerSpec {
  AttentionMask mask = AttentionMask::kCausal;
  int64_t window = 0;              // sliding window (keys including the current one) or chunk size
  bool use_rope = true;            // false: a NoPE layer
  bool moe = false;                // FFN is MoE (else dense SwiGLU)
  int64_t dense_intermediate = 0;  // width of the dense MLP when !moe
  // layer_types "linear_attention": a Gated DeltaNet layer (spec.linear_attention) with a fixed-size
  // recurrent state per sequence instead of KV rows; false: softmax attention over the paged KV cache.
  bool linear_attention = false;
  // Sparse attention (spec.indexer) without an indexer of its own: the layer attends to the keys the
  // nearest earlier layer with one selected (IndexShare, indexer_types "shared").
  bool shared_key_selection = false;
  // Head counts of this layer where they differ from the model's (0: spec.n_heads / spec.n_kv_heads):
  // per-layer query heads, or more KV heads on sliding layers. layer_heads() / layer_kv_heads() read them.
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  bool sinks = true;  // with spec.attention_sinks: whether this layer has them
  // Attends through spec.block_indexer's block selection (block-sparse attention).
  bool block_sparse = false;
  // A Mamba-2 mixer (spec.mamba) instead of attention: a fixed-size recurrent state per sequence.
  bool mamba = false;
  // Layers of one block (Nemotron-H): the mixer alone (no FFN), or the FFN alone (no mixer, no KV rows),
  // either read through the layer's one norm (input_norm).
  bool no_ffn = false;
  bool no_mixer = false;
  // This layer's query / key / value head width where it differs from the model's (0: spec.head_dim);
  // layer_head_dim() reads it. The KV pool's rows are sized for the widest layer.
  int64_t head_dim = 0;
  // KV shared across layers: the earlier layer whose cached keys and values this one attends to (-1: its
  // own). Such a layer has no key / value projections and caches nothing (layer_has_kv() is false).
  int64_t kv_source = -1;
  // Keys equal values: no v_proj; the values are the key projection's output, before the key norm and RoPE.
  bool values_from_keys = false;
  // Compressed KV attention (spec.compressed_kv): one compressed entry per this many tokens (0: none), and
  // whether a lightning indexer selects among them (compressed sparse) or all are attended (heavily
  // compressed).
  int64_t kv_compress_ratio = 0;
  bool compressed_sparse = false;
  // Hash-routed MoE: the experts a token uses come from a fixed table of the token id (tid2eid
  // [vocab, top-k]); the router's scores only weight them.
  bool hash_routed = false;
  bool operator==(const LayerSpec&) const = default;
};

// An attention output gate from a projection of its own (gate_proj / g_proj of the layer's input):
// the heads' outputs times act(x W_g^T) before o_proj, one gate an element or one a head.
enum class OutputGate { kNone, kSigmoid, kSoftplus };

// Per-layer inputs (per-layer embeddings): every layer adds a projection of a per-layer input of `width`
// features, computed once a step from a token-identity table [vocab_size, n_layers * width] (rows gathered
// from the checkpoint, times sqrt(width)) and a projection of the scaled embeddings [n_layers * width, H]
// (times 1 / sqrt(H), RMSNorm of `width` per layer), the two summed and times 1 / sqrt(2). In layer l, after
// the FFN's residual add: x += norm(W_proj (gelu_tanh(W_gate x) * input_l)).
struct PerLayerInputSpec {
  int64_t vocab_size = 0;  // vocab_size_per_layer_input
  int64_t width = 0;       // hidden_size_per_layer_input
  bool operator==(const PerLayerInputSpec&) const = default;
};

// How integer weights are packed into int32 words (quant/pack_quantized.h, runtime/packed_int_source.h).
enum class PackedIntLayout {
  kCompressedTensors,  // pack-quantized: weight_packed [out, in / f], weight_scale, weight_zero_point
  kGptq,               // qweight [in / f, out], qzeros [groups, out / f], scales [groups, out], g_idx [in]
  kAwq,                // GEMM: qweight [in, out / f] (nibble order 0 2 4 6 1 3 5 7), qzeros, scales
};

// Integer weight-only quantization (compressed-tensors pack-quantized, GPTQ or AWQ): the projections
// the config's targets select, minus its ignore list, are stored packed in int32 with per-group
// scales. bits == 0: none. The other weights keep `QuantSpec::format`.
struct PackedIntSpec {
  int bits = 0;                      // 4 or 8
  int64_t group_size = 0;            // columns per scale; 0 = one group per row (strategy "channel")
  bool symmetric = true;             // false: per-group zero points (weight_zero_point)
  std::vector<std::string> targets;  // "Linear" or "re:<regex>" over module names
  std::vector<std::string> ignore;   // module names or "re:<regex>"
  PackedIntLayout layout = PackedIntLayout::kCompressedTensors;
  bool zero_offset = false;  // GPTQ v1 (checkpoint_format "gptq"): qzeros hold z - 1
  // A compressed-tensors config group naming the LM head alone (`day0 quantize --head int8`): the head is
  // packed at head_bits (same group size and symmetry) while `targets` pack the projections at `bits`.
  // head_bits == 0: no such group, the head keeps its dtype.
  int head_bits = 0;
  std::string head_target;  // "lm_head" (or "language_model.lm_head" inside a multimodal wrapper)
  bool operator==(const PackedIntSpec&) const = default;
};

// Where an NVFP4 checkpoint keeps each projection's tensors (both: E2M1 nibbles two a byte, low nibble the
// even column, FP8 E4M3 scales per 16 input columns, one float32 global scale per tensor; io/dequant.h):
enum class Nvfp4Layout {
  kNone,
  // NVIDIA ModelOpt (quant_method "modelopt", quant_algo "NVFP4"): `weight` U8 [out, in/2], `weight_scale`
  // F8_E4M3 [out, in/16], `weight_scale_2` F32 [] (the multiplier), `input_scale` F32 [] (activations).
  kModelOpt,
  // compressed-tensors format "nvfp4-pack-quantized": `weight_packed` U8 [out, in/2], `weight_scale`
  // F8_E4M3 [out, in/16], `weight_global_scale` F32 [1] (a divisor), `input_global_scale` F32 [1] where
  // the config quantizes activations.
  kCompressedTensors,
};

// NVFP4 weights: the projections `targets` select minus `ignore` (packs_module's rules: "Linear" or
// "re:<regex>" from the start of the module name; ignore entries exact or "re:", ModelOpt's globs as
// written, see nvfp4_config.h). The other weights keep QuantSpec::format (the activation dtype).
struct Nvfp4Spec {
  Nvfp4Layout layout = Nvfp4Layout::kNone;
  std::vector<std::string> targets;
  std::vector<std::string> ignore;
  // The checkpoint stores a per-tensor activation scale (ModelOpt input_scale, compressed-tensors
  // input_global_scale): bound and checked finite, never applied, as activations stay float here.
  bool activation_scales = false;
  bool operator==(const Nvfp4Spec&) const = default;
};

struct QuantSpec {
  WeightFormat format = WeightFormat::kBF16;
  PackedIntSpec packed;
  Nvfp4Spec nvfp4;
  int64_t block_rows = 128;  // FP8 block scales
  int64_t block_cols = 128;
  bool ue8m0_scales = false;  // scale_fmt "ue8m0"
  // Routed experts stored FP4 (E2M1 nibbles two a byte, `weight` I8 [out, in/2]) with E8M0 scales per
  // this many input columns (`weight_scale_inv` [out, in/group]): quantization_config expert_dtype "fp4"
  // (DeepSeek-V4: 32). 0: the experts are stored like the other projections.
  int64_t fp4_expert_group = 0;
  bool operator==(const QuantSpec&) const = default;
  // The format the projections run in: the packed integer codes where the checkpoint has them.
  WeightFormat projection_format() const {
    return packed.bits == 8 ? WeightFormat::kInt8 : packed.bits == 4 ? WeightFormat::kInt4 : format;
  }
  // How FP8 block scales are stored. DeepSeek-V3.1 / V3.2 declare ue8m0 over 128x128 blocks but store
  // float32 powers of two; releases with smaller ue8m0 blocks (DeepSeek-V4.1's 32x32) store the exponent
  // bytes (F8_E8M0; U8 and F32 are accepted too, see weight_table.cpp).
  DType fp8_scale_dtype() const {
    return ue8m0_scales && (block_rows != 128 || block_cols != 128) ? DType::kF8E8M0 : DType::kF32;
  }
};

struct ModelSpec {
  // Identity.
  std::string architecture;      // config.json's architectures[0] (else the family's first)
  std::string model_type;        // config.json's model_type (the family's or an alias it accepts)
  std::string family = "llama";  // the registered family's name (family_registry.h)
  AttentionKind attention = AttentionKind::kGqa;

  // Sizes.
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;           // q/k/v head dim for GQA; qk_rope_head_dim for MLA (as HF)
  int64_t intermediate_size = 0;  // dense MLP width
  int64_t max_position_embeddings = 0;

  // Numerics.
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  RopeLayout rope_layout = RopeLayout::kHalfSplit;
  RopeScaling rope;
  double attention_scale = 0.0;  // softmax scale (MLA: includes the yarn mscale^2 correction)

  // Options.
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;                        // per-head RMSNorm of q and k
  bool qk_norm_full_width = false;             // with qk_norm: one RMS over all heads
  bool qk_norm_weightless_after_rope = false;  // weightless RMS (L2) norm of q, k after RoPE
  bool attention_sinks = false;                // a learned logit per head joins the softmax
  // Gated attention: q_proj gives per head [query (head_dim) | gate (head_dim)]; the attention output is
  // multiplied by sigmoid(gate) before o_proj.
  bool attention_output_gate = false;
  // The gate from its own projection: [heads * head_dim, H] (per element) or [heads, H] (per head).
  OutputGate output_gate = OutputGate::kNone;
  bool output_gate_per_head = false;
  int64_t value_head_dim = 0;  // GQA: a value head's width where it differs from head_dim (0: head_dim)
  double value_scale = 1.0;    // v = x W_v^T times this before attention (attention_value_scale)
  bool embedding_sqrt_scale = false;  // the embedded rows times sqrt(hidden_size) (muP input scaling)
  // Sandwich norms: the attention and the FFN outputs each pass an RMSNorm of their own before the
  // residual add (LayerWeights::attn_out_norm, ffn_out_norm).
  bool sandwich_norms = false;
  // OLMo 2's placement in the attention layers (not the linear-attention ones): no input or pre-FFN norm,
  // the attention's and the FFN's outputs each normed (attn_out_norm, ffn_out_norm) before the residual add.
  bool attention_post_norms = false;
  // Sliding-window layers' RoPE where it differs from the model's (rope_theta, partial_rotary_factor,
  // rope apply to the other layers).
  std::optional<LayerRope> sliding_rope;
  // Zero-centred norms: every RMSNorm but the gated one stores an offset w and applies the gain (1 + w) in
  // float32 before casting (the binder keeps 1 + w).
  bool zero_centered_norms = false;
  // SwiGLU-OAI in the dense MLPs and shared experts too (the routed experts' is MoeSpec::swiglu_limit):
  // (clamp(up) + 1) * g * sigmoid(alpha * g), g = min(gate, limit); 0 = plain SwiGLU.
  double mlp_swiglu_limit = 0.0;
  double mlp_swiglu_alpha = 1.702;
  bool tie_word_embeddings = false;
  // Rounding points under BF16 activations: where the reference implementation keeps float32. Set by
  // the family's parser (they are the family's code, not config keys).
  bool norm_gain_f32 = false;        // the RMSNorm gain applies to the float32 normed row, then one cast
  bool router_logits_f32 = false;    // the router's logits (and so its scores) stay float32
  bool routing_weights_f32 = false;  // the top-k weights stay float32 until the expert sum is scaled
  int64_t sliding_window = 0;        // 0 = none
  int64_t attention_chunk_size = 0;  // chunked attention's chunk
  // q *= 1 + attn_scale * ln(1 + floor((p + offset) / floor_scale)): GQA on NoPE layers only
  // (Llama 4, offset 1), MLA on every layer (Mistral 4's llama_4_scaling_beta, offset 0).
  bool attn_temperature_tuning = false;
  double attn_scale = 0.1;
  int64_t floor_scale = 8192;
  int64_t attn_temperature_position_offset = 1;
  // The factor is rounded to the activation dtype before the product (Mistral 4), not the product
  // alone (Llama 4).
  bool attn_temperature_factor_rounded = false;

  std::optional<MlaSpec> mla;
  std::optional<IndexerSpec> indexer;                   // lightning indexer (with mla)
  std::optional<LinearAttentionSpec> linear_attention;  // Gated DeltaNet (layers with linear_attention)
  std::optional<BlockIndexerSpec> block_indexer;        // block-sparse attention (layers with block_sparse)
  std::optional<MambaSpec> mamba;                       // Mamba-2 (layers with mamba)
  std::optional<MoeSpec> moe;
  std::optional<CompressedKvSpec> compressed_kv;                   // layers with kv_compress_ratio
  std::optional<HyperConnectionSpec> hyper_connections;            // the residual as parallel streams
  std::optional<SharedKvLowRankAttentionSpec> shared_kv_low_rank;  // every layer's attention
  std::vector<LayerSpec> layers;                                   // n_layers entries

  DType activation_dtype = DType::kBF16;  // torch_dtype
  QuantSpec weights;                      // how the release stores its projections
  int64_t n_mtp_layers = 0;               // stored after the last layer, skipped by plain decoding
  // Layer pairs (shortcut MoE): layers come in pairs (2N, 2N + 1) = Hugging Face layer N with two attention
  // sublayers. The MoE of the even layer reads its post-attention norm beside its dense MLP, and its
  // output is added to the residual after the odd layer's MLP (the shortcut).
  bool shortcut_moe = false;
  // A dense MLP beside the MoE in every MoE layer: the MLP reads the pre-FFN norm; the MoE reads the
  // residual stream (its router directly, its experts through a norm of their own, moe_in_norm); each
  // output is normed (dense_out_norm, moe_out_norm), and their sum is the FFN's output.
  bool dense_mlp_beside_moe = false;
  // Image-text wrappers (FamilyInfo::wrapper_architectures): text weights live under "language_model." and
  // the config nests them in text_config; the vision tower is not part of this spec.
  bool multimodal_wrapper = false;
  // Decoder norms (each layer's input norm, the final norm) are LayerNorms: mean removed, biased variance,
  // no bias, the gain applied in float32 and one cast; rms_norm_eps holds their eps (Cohere's).
  bool layer_norm_decoder = false;
  // Parallel block: attention and FFN both read the layer's one input norm and join the residual
  // together, x + attn + ffn, summed in that order; no post-attention norm (Cohere's).
  bool parallel_attention_ffn = false;
  // The LM head's logits times this (Cohere's logit_scale); 1 = none.
  double logit_scale = 1.0;
  // Dense MLPs, shared and routed experts are ungated: down(relu(up x)^2) (Nemotron-H's relu2).
  bool relu2_mlp = false;
  // Dense MLPs are GEGLU: down(gelu_tanh(gate x) * up x) (gelu_pytorch_tanh; the gelu rounded before the
  // product); so are the routed experts (in float32 inside the experts kernel).
  bool gelu_tanh_mlp = false;
  // The softmax scale when the family's code fixes it (Gemma 4: 1, its q / k norms set the scale); 0: the
  // usual 1 / sqrt(head_dim) (derive_attention_scale()).
  double fixed_attention_scale = 0.0;
  // Values pass a weightless RMSNorm per head before they are cached (Gemma 4's v_norm).
  bool value_norm = false;
  // Logit soft-capping: logits = c * tanh(logits / c), each step rounded like the activations (0: none).
  double final_logit_softcap = 0.0;
  // With embedding_sqrt_scale: the scale sqrt(hidden) is itself rounded to the activation dtype before the
  // product (Gemma's embed_scale buffer in the weights' dtype).
  bool embedding_scale_rounded = false;
  // Every layer's output times its stored scalar (layer_scalar [1]), rounded.
  bool layer_scalar = false;
  std::optional<PerLayerInputSpec> per_layer_input;  // per-layer embeddings (see PerLayerInputSpec)

  bool operator==(const ModelSpec&) const = default;
};

const char* attention_mask_name(AttentionMask mask);  // "causal", "sliding", "chunked"
// The mechanisms of `spec` that no engine block runs yet ("compressed sparse attention",
// "hyper-connections", ...), in a fixed order; empty when the engine runs the whole model. What parses,
// counts and plans but does not run: `run`, `align`, `serve` and the op recording refuse such a spec
// naming them (unimplemented_mechanisms_status). Remove a name here when its block lands.
std::vector<std::string> unimplemented_mechanisms(const ModelSpec& spec);
// kUnsupported naming the architecture and its unimplemented mechanisms (and what works on it), when
// there are any; ok otherwise. Model loading and the op recording start with it.
Status check_engine_runs(const ModelSpec& spec);
const char* rope_type_name(RopeType type);        // "default", "llama3", "yarn", ...
const char* topk_method_name(TopkMethod method);  // "greedy", "noaux_tc", ...

// weight_format_name() lives in ops/tensor.h and yarn_get_mscale() in ops/rope_table.h.
// Derived counts over `layers`.
int64_t count_moe_layers(const ModelSpec& spec);
int64_t count_masked_layers(const ModelSpec& spec, AttentionMask mask);
// Layers whose attention caches K/V rows in the paged pool (all but linear-attention, Mamba-2 and
// FFN-only layers), and those that keep a recurrent state instead (linear-attention and Mamba-2).
bool layer_has_kv(const LayerSpec& layer);
bool layer_is_recurrent(const LayerSpec& layer);
int64_t count_kv_layers(const ModelSpec& spec);
int64_t count_recurrent_layers(const ModelSpec& spec);
// A GQA layer's query / KV heads (LayerSpec overrides, else the model's), the most KV heads of any
// layer (the width of the KV pool's rows), a value head's width.
int64_t layer_heads(const ModelSpec& spec, const LayerSpec& layer);
int64_t layer_kv_heads(const ModelSpec& spec, const LayerSpec& layer);
int64_t max_kv_heads(const ModelSpec& spec);
int64_t value_head_dim(const ModelSpec& spec);
// A GQA layer's head width (LayerSpec::head_dim, else the model's) and value head width (the model's
// value_head_dim when set, else the layer's head width).
int64_t layer_head_dim(const ModelSpec& spec, const LayerSpec& layer);
int64_t layer_value_head_dim(const ModelSpec& spec, const LayerSpec& layer);
// The KV pool's GQA row: the widest caching layer's keys (KV heads x head width) and values.
int64_t max_key_width(const ModelSpec& spec);
int64_t max_value_width(const ModelSpec& spec);
// KV shared across layers: the last `n_shared` layers each attend to the cache of the last earlier layer
// (before them) with the same mask and window (Gemma 4's num_kv_shared_layers); the rest keep their own.
// False when some shared layer's kind has no such layer.
bool assign_shared_kv_layers(ModelSpec& spec, int64_t n_shared);
// RoPE's rotated dimensions of a head of `head_dim` at `factor`: int(head_dim * factor), even.
int64_t rotary_dims(int64_t head_dim, double factor);

}  // namespace day0
