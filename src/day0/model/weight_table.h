#pragma once
// The weight table of a model family: every tensor a checkpoint holds, described once, by the family
// file (model/families/<family>.cpp) through WeightTableBuilder. Each entry carries its Hugging Face
// name pattern, its shape (computed from the spec), how it is stored (and which dtypes publishers
// use for it), its tensor/expert-parallel shard rule and the engine slot it binds to. The tensor
// manifest, parameter counts, `verify`, synth, the engine's weight binder and the planner's groups
// are all derived from it; none of them names a tensor again.
#include <cstdint>
#include <string>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/model/stored_layout.h"

namespace day0 {

struct ModelSpec;
struct TensorManifest;

enum class TensorRole {
  kEmbedding,        // model.embed_tokens.weight
  kLmHead,           // lm_head.weight (absent when tied)
  kNorm,             // every RMSNorm / LayerNorm weight
  kAttention,        // q/k/v/o, MLA projections, biases, sinks
  kDenseMlp,         // dense SwiGLU layers
  kRouter,           // router / gate weights and biases, correction bias
  kRoutedExpert,     // routed expert weights (and their biases)
  kSharedExpert,     // shared expert weights (and its sigmoid gate)
  kHyperConnection,  // hyper-connections' stream-mixing projections, biases and scales
  kQuantScale,       // FP8 weight_scale_inv, MXFP4 scales: storage, not parameters
};

// How a tensor is stored in a release.
enum class WeightStorage {
  kPlain,        // the activation dtype (norms, biases, embeddings); never quantized
  kProjection,   // a linear weight [out, in]: FP8 block checkpoints store it F8_E4M3 + `_scale_inv`
  kKeptF32,      // written in the activation dtype, but publishers often keep it float32 inside a
                 // BF16 checkpoint (routers, sinks, norms): both are accepted
  kF32,          // float32 in the release (e_score_correction_bias); the activation dtype is accepted
  kMxfp4Blocks,  // `*_blocks` [.., cols/32, 16] U8: two 4-bit values a byte
  kMxfp4Scales,  // `*_scales` [.., cols/32] U8 (E8M0); also the FP4 projections' `weight_scale_inv`
  kFp4Packed,    // an FP4 projection's `weight` I8 [out, in/2]: two E2M1 values a byte (fp4_expert_group)
  kI64,          // an integer table (a hash router's token -> experts map): int64, no parameters
  kPackedInt,    // compressed-tensors pack-quantized: a projection's `weight_packed` I32 and its
                 // `weight_scale` / `weight_zero_point` / `weight_shape` (spec.weights.packed)
  kNvfp4Scale,   // an NVFP4 projection's F8_E4M3 group scales, F32 global or activation scale
                 // (spec.weights.nvfp4; its nibbles are kFp4Packed U8)
};

// How tensor / expert parallelism splits a tensor over ranks.
enum class ShardRule {
  kReplicated,  // whole on every rank (norms, routers, MLA down-projections)
  kColumn,      // output features split by heads / width (dim 0 of [out, in]); no communication
  kColumnKv,    // column split by KV heads; copied once TP exceeds the KV heads
  kRow,         // input features split (dim 1 of [out, in]); an all-reduce follows
  kExpert,      // whole experts per rank (EP); `dim` is the stacked expert dim, -1 when one per tensor
  kVocab,       // vocabulary rows split (embedding, lm_head); an all-gather follows
};

struct ShardSpec {
  ShardRule rule = ShardRule::kReplicated;
  int dim = -1;  // dimension of the stored tensor that is split (-1: none)
  bool operator==(const ShardSpec&) const = default;
};

// Where the engine's binder puts a tensor (runtime/model_weights.h).
enum class WeightSlot {
  kNone,  // not bound: scales consumed with their weight, tensors no block reads yet
  kEmbedding,
  kLmHead,
  kFinalNorm,
  kInputNorm,
  kPostNorm,
  kQ,
  kK,
  kV,
  kO,
  kQBias,
  kKBias,
  kVBias,
  kOBias,
  kQNorm,
  kKNorm,
  kSinks,
  kAttnGate,     // the output gate's own projection (gate_proj / g_proj)
  kAttnOutNorm,  // sandwich norms: the attention output's RMSNorm gain
  kFfnOutNorm,   // and the FFN output's
  kQA,
  kQABias,
  kQANorm,
  kQB,
  kKvA,
  kKvABias,
  kKvANorm,
  kKvB,
  kMlpGate,
  kMlpUp,
  kMlpDown,
  kMlpGateBias,
  kMlpUpBias,
  kMlpDownBias,
  kRouter,
  kRouterBias,
  kCorrectionBias,
  kExpertGate,                // one expert's [I, H]
  kExpertUp,                  // one expert's [I, H]
  kExpertDown,                // one expert's [H, I]
  kExpertsGateUpConcat,       // stacked x @ W [E, H, 2I], gate the first half
  kExpertsGateUpInterleaved,  // stacked x @ W [E, H, 2I], gate at even columns
  kExpertsDown,               // stacked x @ W [E, I, H]
  kExpertsGateUpRows,         // stacked nn.Linear [E, 2I, H], gate the first I rows
  kExpertsDownRows,           // stacked nn.Linear [E, H, I]
  kExpertsGateUpBias,         // [E, 2I]
  kExpertsDownBias,           // [E, H]
  kExpertsGateUpMxfp4,        // `gate_up_proj_blocks` (+ `_scales`), gate at even rows
  kExpertsDownMxfp4,          // `down_proj_blocks` (+ `_scales`)
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kSharedExpertGate,  // the shared expert's sigmoid gate [1, H]
  kHashRoutingTable,  // a hash-routed MoE's token id -> experts table (tid2eid) [vocab, top_k], integer
  // Hyper-connections (ModelSpec::hyper_connections, n streams): before the attention, before the FFN,
  // and the head's final collapse. fn [(2 + n) n, n H] ([n, n H] the head's), base [(2 + n) n] ([n]),
  // scale [3] ([1]).
  kHcAttnFn,
  kHcAttnBase,
  kHcAttnScale,
  kHcFfnFn,
  kHcFfnBase,
  kHcFfnScale,
  kHcHeadFn,
  kHcHeadBase,
  kHcHeadScale,
  // Lightning indexer (sparse attention).
  kIndexerQ,          // wq_b [n_I * d_I, q_lora_rank]
  kIndexerK,          // wk [d_I, H]
  kIndexerKNorm,      // k_norm.weight [d_I] (LayerNorm)
  kIndexerKNormBias,  // k_norm.bias [d_I]
  kIndexerWeights,    // weights_proj [n_I, H]
  // Block-sparse attention's indexer: q_proj / k_proj bind to kIndexerQ / kIndexerK ([n_I * d_I, H],
  // [d_I, H]); its per-head RMSNorms of q and k (zero-centred like the model's other norms).
  kIndexerQNorm,     // [d_I]
  kIndexerKRmsNorm,  // [d_I]
  // Shared key = value attention (spec.shared_kv_low_rank; its queries bind to kQA / kQANorm / kQB).
  kSharedKv,      // wkv [head_dim, H]: the one head that is both key and value
  kSharedKvNorm,  // its RMSNorm gain [head_dim]
  kOutGroupsA,    // wo_a [groups * o_rank, heads * head_dim / groups]: each head group's own block
  kOutGroupsB,    // wo_b [H, groups * o_rank]
  // Compressed KV attention's compressor (width C = head_dim, 2 head_dim where windows overlap) and, on
  // compressed sparse layers, the lightning indexer's own (at index_head_dim; kIndexerQ / kIndexerWeights).
  kCompressorKv,         // wkv [C, H]
  kCompressorGate,       // wgate [C, H]
  kCompressorBias,       // ape [ratio, C]: the gate's per-slot bias
  kCompressorNorm,       // norm [head_dim]: the pooled entry's RMSNorm gain
  kIndexCompressorKv,    // indexer.compressor.wkv [2 d_I, H]
  kIndexCompressorGate,  // indexer.compressor.wgate [2 d_I, H]
  kIndexCompressorBias,  // indexer.compressor.ape [ratio, 2 d_I]
  kIndexCompressorNorm,  // indexer.compressor.norm [d_I]
  // Gated DeltaNet (linear_attn.*).
  kLinearQkvz,    // in_proj_qkvz [2 * n_k * d_k + 2 * n_v * d_v, H], grouped per key head
  kLinearBa,      // in_proj_ba [2 * n_v, H], grouped per key head
  kLinearQkv,     // in_proj_qkv [2 * n_k * d_k + n_v * d_v, H]: q, k of every key head, v of every value head
  kLinearQ,       // q_proj [n_k * d_k, H] (OLMo-Hybrid's separate q / k / v projections)
  kLinearK,       // k_proj [n_k * d_k, H]
  kLinearV,       // v_proj [n_v * d_v, H]
  kLinearZ,       // in_proj_z [n_v * d_v, H]
  kLinearB,       // in_proj_b [n_v, H]
  kLinearA,       // in_proj_a [n_v, H]
  kLinearConv,    // conv1d.weight [C, 1, K] (depthwise, no bias)
  kLinearConvQ,   // q_conv1d.weight [n_k * d_k, 1, K]: the conv's q channels stored apart (OLMo-Hybrid)
  kLinearConvK,   // k_conv1d.weight [n_k * d_k, 1, K]
  kLinearConvV,   // v_conv1d.weight [n_v * d_v, 1, K], after q and k in the table
  kLinearALog,    // A_log [n_v]
  kLinearDtBias,  // dt_bias [n_v]
  kLinearNorm,    // norm.weight [d_v] (gated RMSNorm, plain gain)
  kLinearOut,     // out_proj [H, n_v * d_v]
  // Mamba-2 (mixer.* of a Mamba layer).
  kMambaIn,        // in_proj [I + C + n_heads, H]: z, x B C (the conv's C channels), dt
  kMambaConv,      // conv1d.weight [C, 1, K]
  kMambaConvBias,  // conv1d.bias [C]
  kMambaDtBias,    // dt_bias [n_heads]
  kMambaALog,      // A_log [n_heads]
  kMambaD,         // D [n_heads]
  kMambaNorm,      // norm.weight [I] (gated RMSNorm per group)
  kMambaOut,       // out_proj [H, I]
  // Latent MoE: the routed experts run in a latent space of their own.
  kMoeLatentIn,   // fc1_latent_proj [latent, H]
  kMoeLatentOut,  // fc2_latent_proj [H, latent]
  // Per-layer inputs (ModelSpec::per_layer_input, P wide): the model's token-identity table, its projection
  // of the embeddings and that projection's norm; each layer's gate, projection and norm.
  kPerLayerEmbedding,        // embed_tokens_per_layer [V_p, n_layers * P] (rows gathered, never expanded)
  kPerLayerModelProjection,  // per_layer_model_projection [n_layers * P, H]
  kPerLayerProjectionNorm,   // per_layer_projection_norm [P]
  kPerLayerInputGate,        // per_layer_input_gate [P, H]
  kPerLayerProjection,       // per_layer_projection [H, P]
  kPerLayerInputNorm,        // post_per_layer_input_norm [H]
  kLayerScalar,              // layer_scalar [1]: the layer's output times it (ModelSpec::layer_scalar)
  // A dense MLP beside the MoE (ModelSpec::dense_mlp_beside_moe): norms [H] of the experts' input, of the
  // dense MLP's output and of the MoE's output; the router's input gain [H] and per-expert scales [E].
  kMoeInNorm,
  kDenseOutNorm,
  kMoeOutNorm,
  kRouterInputScale,
  kRouterExpertScale,
  // A DeepSeek-V3-layout multi-token-prediction layer's input (bound only when asked, ModelWeights::mtp): the
  // norms [H] of the next token's embedding and of the main model's hidden state, and eh_proj [H, 2H] over
  // their concatenation [embedding | hidden]. Its embed_tokens, shared_head.norm and shared_head.head take
  // kEmbedding, kFinalNorm and kLmHead inside the MTP layer.
  kMtpEmbeddingNorm,
  kMtpHiddenNorm,
  kMtpProjection,
  // DeepSeek-V4's MTP layer projects the two inputs apart and adds them: e_proj [H, H] of the normed
  // embedding, h_proj [H, H] of each normed hyper-connection stream of the main model.
  kMtpEmbeddingProjection,
  kMtpHiddenProjection,
};

const char* tensor_role_name(TensorRole role);  // "embedding", "routed_expert", ...
const char* shard_rule_name(ShardRule rule);    // "replicated", "column", ...

class WeightTableBuilder;
// A family's weight table: emits every tensor of `spec` into the builder.
using WeightTableFn = void (*)(const ModelSpec& spec, WeightTableBuilder& b);

// Collects the entries a family's weight table emits. Names are given relative to the current
// scope: the decoder prefix ("model.") outside layers, "model.layers.{L}." inside one; `{E}` in a
// name expands over the routed experts. Entries become TensorSpecs (tensor_manifest.h).
class WeightTableBuilder {
 public:
  explicit WeightTableBuilder(const ModelSpec& spec, TensorManifest& out);

  const ModelSpec& spec() const { return spec_; }
  // Enters decoder layer `layer` (MTP layers are those at or past num_hidden_layers). `hf_layer`, when
  // given, is the index in the tensor names ("model.layers.{hf_layer}."), for families whose
  // engine layers are sublayers of one Hugging Face layer (layer pairs: layer 2N + i is N).
  void begin_layer(int64_t layer, int64_t hf_layer = -1);
  // Enters multi-token-prediction layer `layer` (>= num_hidden_layers) for a release that stores its MTP
  // module outside the decoder: names are relative to the absolute `scope` ("mtp." or "mtp.layers.0.").
  void begin_mtp_scope(int64_t layer, std::string scope);
  void end_layer();
  // Absolute name for tensors outside the decoder prefix (an image-text wrapper's language_model.lm_head).
  void add_absolute(std::string name, std::vector<int64_t> shape, WeightStorage storage, TensorRole role,
                    ShardSpec shard, WeightSlot slot);
  // `name` relative to the scope; a `{E}` in it expands over spec.moe->n_experts experts, or names
  // expert `expert` only when that is given.
  void add(const std::string& name, std::vector<int64_t> shape, WeightStorage storage, TensorRole role,
           ShardSpec shard, WeightSlot slot, int64_t expert = -1);

  // A tensor transformers' save_pretrained writes that the model never reads (the gate/up
  // rows of zero-computation experts): `verify` accepts it when present (shape and dtype checked),
  // nothing requires, counts, binds or synthesises it. `expert` names the expert index in `{E}`.
  void add_unused(const std::string& name, std::vector<int64_t> shape, WeightStorage storage, TensorRole role,
                  int64_t expert = -1);

  // Top-level tensor names starting with `prefix` that transformers drops on load (e.g. a
  // multi-token-prediction module "mtp."): `verify` accepts them unchecked; nothing counts, binds or
  // synthesises them.
  void ignore_prefix(std::string prefix);
  // Tensors under `canonical` may be stored under `alternative` instead (a StoredLayout of one prefix
  // renaming).
  void alias_prefix(std::string canonical, std::string alternative);
  // The checkpoint may hold the table's tensors under `layout`'s names (TensorManifest::stored_layouts).
  void stored_layout(StoredLayout layout);

  // Prefix of the current scope, e.g. "model.layers.3.".
  const std::string& scope() const { return scope_; }
  bool failed() const { return failed_; }
  const std::string& error() const { return error_; }

 private:
  void push(std::string name, std::string pattern, std::vector<int64_t> shape, DType dtype,
            WeightStorage storage, TensorRole role, ShardSpec shard, WeightSlot slot, int64_t expert);
  void push_fp4(std::string name, std::string pattern, std::vector<int64_t> shape, TensorRole role,
                ShardSpec shard, WeightSlot slot, int64_t expert);
  void push_nvfp4(std::string name, std::string pattern, std::vector<int64_t> shape, TensorRole role,
                  ShardSpec shard, WeightSlot slot, int64_t expert);
  void push_packed(std::string name, std::string pattern, std::vector<int64_t> shape, TensorRole role,
                   ShardSpec shard, WeightSlot slot, int64_t expert);
  void push_weight(std::string name, std::string pattern, std::vector<int64_t> shape, WeightStorage storage,
                   TensorRole role, ShardSpec shard, WeightSlot slot, int64_t expert);

  const ModelSpec& spec_;
  TensorManifest& out_;
  std::string prefix_;  // decoder prefix
  std::string scope_;
  std::string scope_pattern_;
  int64_t layer_ = -1;
  bool failed_ = false;
  std::string error_;
};

}  // namespace day0
