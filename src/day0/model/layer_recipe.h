#pragma once
// The layer recipe: one decoder layer's forward pass as data — an ordered list of block steps over the
// step's [T, H] values — which the engine replays for every layer (runtime/engine.cpp), `day0 inspect`
// prints, and a family composes in its own file. The blocks themselves (attention, MoE, norms) are the
// shared vocabulary in runtime/; which of them a layer runs, in what order, reading and writing which
// value, is the recipe's. A family whose layers are the pre-norm decoder, with the options the spec's
// mechanisms switch on (`standard_layer_recipe`), needs no recipe of its own. A family with another shape (a
// parallel block, post-only norms, a layer pair sharing a MoE) registers its recipe function with its
// FamilyRegistrar (model/family_registry.h).
#include <cstdint>
#include <string>
#include <vector>

#include "day0/model/model_spec.h"

namespace day0 {

// The [T, H] values of a step a recipe reads and writes (T rows of the step, H = hidden_size).
enum class LayerValue : uint8_t {
  kStream,  // the residual stream: the layer's input and output ([T, n H]: n streams with hyper-connections)
  kNormed,  // a norm's output, a block's input
  kOut,     // a block's output
  kSide,    // a second block output in the same layer (the FFN of a parallel block)
  kCarry,   // a block output held for the next layer (the shortcut MoE of a layer pair)
};
inline constexpr int kLayerValues = 5;

// The layer's norm weights a norm step reads.
enum class LayerNorm : uint8_t {
  kInput,    // input_layernorm
  kPost,     // post_attention_layernorm (the FFN's input norm)
  kAttnOut,  // a norm of the mixer's output (sandwich norms, post-only norms)
  kFfnOut,   // a norm of the FFN's output
};

enum class LayerOp : uint8_t {
  kNorm,               // out = decoder_norm(in; norm): the model's decoder norm (RMSNorm or LayerNorm)
  kOutputNorm,         // out = rms_norm(in; norm): a block output's RMSNorm
  kMixer,              // out = the layer's token mixer over in: softmax attention (GQA or MLA), Gated
                       //   DeltaNet or Mamba-2, as the LayerSpec and the model's attention kind say
  kDenseMlp,           // out = the dense MLP(in)
  kMoe,                // out = the MoE block(in)
  kDenseMlpBesideMoe,  // out = norm(mlp(in)) + norm(moe(stream)): a MoE beside the dense MLP
  kResidualAdd,        // stream += in, rounded
  kPerLayerInput,      // stream += the per-layer input block (spec.per_layer_input)
  kLayerScalar,        // stream *= the layer's stored scalar, rounded
  // Hyper-connections (spec.hyper_connections): the stream is n streams [T, n H]. kHcCollapse reads them
  // (in = kStream) into one block input (out, [T, H]) with the layer's `hc` weights and keeps their post
  // and comb mixes; kHcExpand spreads a block's output (in) back over the streams (out = kStream) with
  // the mixes of the collapse before it.
  kHcCollapse,
  kHcExpand,
};

// The hyper-connection weights of a layer a kHcCollapse step uses.
enum class LayerHc : uint8_t {
  kAttn,  // before the mixer
  kFfn,   // before the FFN
};

struct LayerStep {
  LayerOp op = LayerOp::kResidualAdd;
  LayerValue in = LayerValue::kNormed;
  LayerValue out = LayerValue::kOut;
  LayerNorm norm = LayerNorm::kInput;  // kNorm / kOutputNorm only
  LayerHc hc = LayerHc::kAttn;         // kHcCollapse only
  bool operator==(const LayerStep&) const = default;
};

struct LayerRecipe {
  std::vector<LayerStep> steps;
  // The layer ends a layer of the reference implementation: its output is a hidden state the reference
  // dumps (false for the first layer of a pair the reference counts as one).
  bool ends_reference_layer = true;
  bool uses(LayerValue v) const;
  bool operator==(const LayerRecipe&) const = default;
};

// A family's recipe function (FamilyInfo::layer_recipe): the steps of layer `layer` of `spec`.
using LayerRecipeFn = LayerRecipe (*)(const ModelSpec& spec, int64_t layer);

// The pre-norm decoder layer: norm(input) -> mixer -> [norm(mixer out)] -> add -> norm(post) -> FFN (dense,
// MoE, or a MoE beside the dense MLP with spec.dense_mlp_beside_moe) -> [norm(FFN out)] -> add, the
// bracketed norms with spec.sandwich_norms; then the per-layer input block (spec.per_layer_input) and the
// layer's scalar (spec.layer_scalar). A layer with LayerSpec::no_mixer / no_ffn runs its one block (the
// mixer, or the FFN) through its one norm.
LayerRecipe standard_layer_recipe(const ModelSpec& spec, int64_t layer);

// Pieces of the vocabulary for recipes of other shapes (each appends its steps).
// norm(stream; norm) -> kNormed.
void add_norm(LayerRecipe& r, LayerNorm norm);
// `op` over `in` into kOut, then its output norm when `out_norm`, then stream += kOut.
void add_residual_block(LayerRecipe& r, LayerOp op, LayerValue in, bool out_norm, LayerNorm out_norm_weight);

// The pre-norm layer over hyper-connected streams: for the mixer, then the FFN, collapse the streams
// (kHcCollapse), norm, block, expand its output over the streams (kHcExpand).
LayerRecipe hyper_connection_layer_recipe(const ModelSpec& spec, int64_t layer);

// The layer's recipe: its family's (FamilyInfo::layer_recipe) or the standard one.
LayerRecipe layer_recipe(const ModelSpec& spec, int64_t layer);
// Every layer's recipe of the spec.
std::vector<LayerRecipe> layer_recipes(const ModelSpec& spec);

// "norm(input) > mixer > add > norm(post) > moe > add": the steps in one line.
std::string describe_recipe(const LayerRecipe& r);
const char* layer_op_name(LayerOp op);
const char* layer_value_name(LayerValue v);
const char* layer_norm_name(LayerNorm n);
const char* layer_hc_name(LayerHc hc);

}  // namespace day0
