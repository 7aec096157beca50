// The one weight binder: walks the family's weight table (the tensor manifest) and puts each tensor in
// the ModelWeights field its slot names. No family code here: a new family that reuses existing
// slots needs nothing in this file.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "day0/dist/expert_placement.h"
#include "day0/dist/pipeline_stages.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/model_weights.h"

namespace day0 {
namespace {

int64_t numel(const TensorSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;  // the manifest checked these products
  return n;
}

std::string strip_suffix(const std::string& name, const std::string& suffix) {
  return name.ends_with(suffix) ? name.substr(0, name.size() - suffix.size()) : name;
}

class TableBinder {
 public:
  // `first_layer`: the table's layer index of out.layers[0] (an MTP layer's, bound as a one-layer model).
  TableBinder(WeightBinder& b, ModelWeights& out, int64_t first_layer = 0)
      : b_(b), out_(out), first_layer_(first_layer) {}

  // Binds this rank's part of `t` and counts its bytes as split or replicated.
  Status bind(const TensorSpec& t) {
    const uint64_t before = b_.bytes_bound();
    D0_RETURN_IF_ERROR(bind_slot(t));
    const uint64_t bytes = b_.bytes_bound() - before;
    (t.shard.rule == ShardRule::kReplicated ? out_.bound.replicated : out_.bound.split) += bytes;
    if (t.shard.rule == ShardRule::kExpert) out_.bound.experts += bytes;
    return Status::ok();
  }

 private:
  Status bind_slot(const TensorSpec& t) {
    const int64_t index = t.layer - first_layer_;
    if (t.layer >= 0 && (index < 0 || index >= static_cast<int64_t>(out_.layers.size()))) {
      return internal_error(fmt::format("tensor {}: layer {} outside the model", t.name, t.layer));
    }
    LayerWeights* layer = t.layer >= 0 ? &out_.layers[static_cast<size_t>(index)] : nullptr;
    const bool in_layer = layer != nullptr;
    switch (t.slot) {
      case WeightSlot::kNone:
        return Status::ok();
      case WeightSlot::kEmbedding: {
        Linear embedding;
        D0_RETURN_IF_ERROR(linear(t, embedding));
        out_.embedding = embedding.w;
        return Status::ok();
      }
      case WeightSlot::kLmHead:
        return linear(t, out_.lm_head);
      case WeightSlot::kFinalNorm:
        return norm(t, out_.final_norm);
      case WeightSlot::kPerLayerEmbedding: {
        Linear table;
        D0_RETURN_IF_ERROR(linear(t, table));
        out_.per_layer_embedding = table.w;
        return Status::ok();
      }
      case WeightSlot::kPerLayerModelProjection:
        return linear(t, out_.per_layer_model_projection);
      case WeightSlot::kPerLayerProjectionNorm:
        return norm(t, out_.per_layer_projection_norm);
      case WeightSlot::kMtpEmbeddingNorm:
        return norm(t, out_.mtp_input.embedding_norm);
      case WeightSlot::kMtpHiddenNorm:
        return norm(t, out_.mtp_input.hidden_norm);
      case WeightSlot::kMtpProjection:
        return linear(t, out_.mtp_input.projection);
      case WeightSlot::kMtpEmbeddingProjection:
        return linear(t, out_.mtp_input.embedding_projection);
      case WeightSlot::kMtpHiddenProjection:
        return linear(t, out_.mtp_input.hidden_projection);
      case WeightSlot::kHcHeadFn:
        return linear(t, out_.hc_head.fn);
      case WeightSlot::kHcHeadBase:
        return vector(t, out_.hc_head.base);
      case WeightSlot::kHcHeadScale:
        return vector(t, out_.hc_head.scale);
      default:
        break;
    }
    if (!in_layer) return internal_error(fmt::format("tensor {}: a layer slot outside the layers", t.name));
    AttentionWeights& a = layer->attn;
    DenseMlpWeights& mlp = layer->mlp;
    MoeWeights& moe = layer->moe;
    switch (t.slot) {
      case WeightSlot::kInputNorm:
        return norm(t, layer->input_norm);
      case WeightSlot::kPostNorm:
        return norm(t, layer->post_norm);
      case WeightSlot::kQ:
        return linear(t, a.q);
      case WeightSlot::kK:
        return linear(t, a.k);
      case WeightSlot::kV:
        return linear(t, a.v);
      case WeightSlot::kO:
        return linear(t, a.o);
      case WeightSlot::kQBias:
        return bias(t, a.q);
      case WeightSlot::kKBias:
        return bias(t, a.k);
      case WeightSlot::kVBias:
        return bias(t, a.v);
      case WeightSlot::kOBias:
        return bias(t, a.o);
      case WeightSlot::kQNorm:
        return norm(t, a.q_norm);
      case WeightSlot::kKNorm:
        return norm(t, a.k_norm);
      case WeightSlot::kSinks:
        return vector(t, a.sinks);
      case WeightSlot::kAttnGate:
        return linear(t, a.gate);
      case WeightSlot::kAttnOutNorm:
        return norm(t, layer->attn_out_norm);
      case WeightSlot::kFfnOutNorm:
        return norm(t, layer->ffn_out_norm);
      case WeightSlot::kQA:
        return linear(t, a.q_a);
      case WeightSlot::kQABias:
        return bias(t, a.q_a);
      case WeightSlot::kQANorm:
        return vector(t, a.q_a_norm);
      case WeightSlot::kQB:
        return linear(t, a.q_b);
      case WeightSlot::kKvA:
        return linear(t, a.kv_a);
      case WeightSlot::kKvABias:
        return bias(t, a.kv_a);
      case WeightSlot::kKvANorm:
        return vector(t, a.kv_a_norm);
      case WeightSlot::kKvB:
        return linear(t, a.kv_b);
      case WeightSlot::kIndexerQ:
        return linear(t, a.index_q);
      case WeightSlot::kIndexerK:
        return linear(t, a.index_k);
      case WeightSlot::kIndexerWeights:
        return linear(t, a.index_weights);
      case WeightSlot::kIndexerKNorm:
        return vector(t, a.index_k_norm);
      case WeightSlot::kIndexerKNormBias:
        return vector(t, a.index_k_norm_bias);
      case WeightSlot::kIndexerQNorm:
        return norm(t, a.index_q_norm);
      case WeightSlot::kIndexerKRmsNorm:
        return norm(t, a.index_k_norm);
      case WeightSlot::kSharedKv:
        return linear(t, a.kv);
      case WeightSlot::kSharedKvNorm:
        return vector(t, a.kv_norm);
      case WeightSlot::kOutGroupsA:
        return linear(t, a.o_a);
      case WeightSlot::kOutGroupsB:
        return linear(t, a.o_b);
      case WeightSlot::kCompressorKv:
        return linear(t, a.compressor.kv);
      case WeightSlot::kCompressorGate:
        return linear(t, a.compressor.gate);
      case WeightSlot::kCompressorBias: {  // [ratio, C]
        D0_ASSIGN_OR_RETURN(a.compressor.position_bias, b_.flat(t.name, t.shape));
        return Status::ok();
      }
      case WeightSlot::kCompressorNorm:
        return vector(t, a.compressor.norm);
      case WeightSlot::kIndexCompressorKv:
        return linear(t, a.index_compressor.kv);
      case WeightSlot::kIndexCompressorGate:
        return linear(t, a.index_compressor.gate);
      case WeightSlot::kIndexCompressorBias: {  // [ratio, 2 d_I]
        D0_ASSIGN_OR_RETURN(a.index_compressor.position_bias, b_.flat(t.name, t.shape));
        return Status::ok();
      }
      case WeightSlot::kIndexCompressorNorm:
        return vector(t, a.index_compressor.norm);
      case WeightSlot::kLinearQkvz:
        return linear(t, layer->linear.in_qkvz);
      case WeightSlot::kLinearBa:
        return linear(t, layer->linear.in_ba);
      case WeightSlot::kLinearQkv: {  // [q | k | v]: this rank's key heads' q and k, its value heads' v
        const LinearAttentionSpec& la = *b_.spec().linear_attention;
        const int64_t kd = la.key_dim(), vd = la.value_dim(), cols = t.shape[1];
        const ShardRange q = even_shard(kd, out_.shard), v = even_shard(vd, out_.shard);
        LinearAttentionWeights& w = layer->linear;
        D0_ASSIGN_OR_RETURN(w.in_q, b_.linear_part(t.name, t.shape[0], cols, q, {0, cols}));
        D0_ASSIGN_OR_RETURN(w.in_k,
                            b_.linear_part(t.name, t.shape[0], cols, {kd + q.begin, kd + q.end}, {0, cols}));
        D0_ASSIGN_OR_RETURN(
            w.in_v, b_.linear_part(t.name, t.shape[0], cols, {2 * kd + v.begin, 2 * kd + v.end}, {0, cols}));
        return Status::ok();
      }
      case WeightSlot::kLinearQ:
        return linear(t, layer->linear.in_q);
      case WeightSlot::kLinearK:
        return linear(t, layer->linear.in_k);
      case WeightSlot::kLinearV:
        return linear(t, layer->linear.in_v);
      case WeightSlot::kLinearZ:
        return linear(t, layer->linear.in_z);
      case WeightSlot::kLinearB:
        return linear(t, layer->linear.in_b);
      case WeightSlot::kLinearA:
        return linear(t, layer->linear.in_a);
      case WeightSlot::kLinearOut:
        return linear(t, layer->linear.out);
      case WeightSlot::kLinearConv: {
        if (out_.shard.whole()) {
          D0_ASSIGN_OR_RETURN(layer->linear.conv, b_.flat(t.name, t.shape));
        } else {  // channels [q | k | v]: this rank's key heads' q and k, its value heads' v
          const LinearAttentionSpec& la = *b_.spec().linear_attention;
          const ShardRange q = even_shard(la.key_dim(), out_.shard),
                           v = even_shard(la.value_dim(), out_.shard);
          const ShardRange runs[] = {q,
                                     {la.key_dim() + q.begin, la.key_dim() + q.end},
                                     {2 * la.key_dim() + v.begin, 2 * la.key_dim() + v.end}};
          D0_ASSIGN_OR_RETURN(layer->linear.conv, b_.flat_rows(t.name, t.shape, runs));
        }
        return Status::ok();
      }
      case WeightSlot::kLinearConvQ:  // the conv's channels stored per group: [q | k | v] joined in order
      case WeightSlot::kLinearConvK:
      case WeightSlot::kLinearConvV: {
        const LinearAttentionSpec& la = *b_.spec().linear_attention;
        const int part = static_cast<int>(t.slot) - static_cast<int>(WeightSlot::kLinearConvQ);
        if (conv_parts_[t.layer]++ != part) {
          return internal_error(
              fmt::format("tensor {}: the conv's q, k and v parts bind in that order", t.name));
        }
        const int64_t rows = t.slot == WeightSlot::kLinearConvV ? la.value_dim() : la.key_dim();
        const ShardRange run = out_.shard.whole() ? ShardRange{0, rows} : even_shard(rows, out_.shard);
        D0_ASSIGN_OR_RETURN(layer->linear.conv,
                            b_.append_rows(layer->linear.conv, t.name, t.shape, std::span(&run, 1)));
        return Status::ok();
      }
      case WeightSlot::kLinearALog:
        return vector(t, layer->linear.a_log);
      case WeightSlot::kLinearDtBias:
        return vector(t, layer->linear.dt_bias);
      case WeightSlot::kLinearNorm:
        return vector(t, layer->linear.norm);
      case WeightSlot::kMlpGate:
        return linear(t, mlp.gate);
      case WeightSlot::kMlpUp:
        return linear(t, mlp.up);
      case WeightSlot::kMlpDown:
        return linear(t, mlp.down);
      case WeightSlot::kMlpGateBias:
        return bias(t, mlp.gate);
      case WeightSlot::kMlpUpBias:
        return bias(t, mlp.up);
      case WeightSlot::kMlpDownBias:
        return bias(t, mlp.down);
      case WeightSlot::kRouter:
        return linear(t, moe.router);
      case WeightSlot::kRouterBias:
        return bias(t, moe.router);
      case WeightSlot::kCorrectionBias:
        return vector(t, moe.correction_bias);
      case WeightSlot::kSharedGate:
        return linear(t, moe.shared.gate);
      case WeightSlot::kSharedUp:
        return linear(t, moe.shared.up);
      case WeightSlot::kSharedDown:
        return linear(t, moe.shared.down);
      case WeightSlot::kSharedExpertGate:
        return linear(t, moe.shared_gate);
      case WeightSlot::kExpertGate:
      case WeightSlot::kExpertUp:
      case WeightSlot::kExpertDown:
        return one_expert(t, moe);
      case WeightSlot::kMoeLatentIn:
        return linear(t, moe.latent_in);
      case WeightSlot::kMoeLatentOut:
        return linear(t, moe.latent_out);
      case WeightSlot::kMambaIn:
        return linear(t, layer->mamba.in);
      case WeightSlot::kMambaOut:
        return linear(t, layer->mamba.out);
      case WeightSlot::kMambaConv: {
        D0_ASSIGN_OR_RETURN(layer->mamba.conv, b_.flat(t.name, t.shape));
        return Status::ok();
      }
      case WeightSlot::kMambaConvBias:
        return vector(t, layer->mamba.conv_bias);
      case WeightSlot::kMambaDtBias:
        return vector(t, layer->mamba.dt_bias);
      case WeightSlot::kMambaALog:
        return vector(t, layer->mamba.a_log);
      case WeightSlot::kMambaD:
        return vector(t, layer->mamba.d);
      case WeightSlot::kMambaNorm:
        return vector(t, layer->mamba.norm);
      case WeightSlot::kPerLayerInputGate:
        return linear(t, layer->per_layer.gate);
      case WeightSlot::kPerLayerProjection:
        return linear(t, layer->per_layer.projection);
      case WeightSlot::kPerLayerInputNorm:
        return norm(t, layer->per_layer.norm);
      case WeightSlot::kLayerScalar:
        return vector(t, layer->layer_scalar);
      case WeightSlot::kMoeInNorm:
        return norm(t, layer->moe_in_norm);
      case WeightSlot::kDenseOutNorm:
        return norm(t, layer->dense_out_norm);
      case WeightSlot::kMoeOutNorm:
        return norm(t, layer->moe_out_norm);
      case WeightSlot::kRouterInputScale:
        return vector(t, moe.router_input_scale);
      case WeightSlot::kRouterExpertScale:
        return vector(t, moe.expert_scale);
      case WeightSlot::kHashRoutingTable: {  // every entry an expert of the layer
        if (t.shape.size() != 2 || !b_.spec().moe)
          return internal_error("weight table: a hash routing table that is not [vocab, top_k]: " + t.name);
        D0_ASSIGN_OR_RETURN(moe.hash_table,
                            b_.index_table(t.name, t.shape[0], t.shape[1], b_.spec().moe->n_experts));
        return Status::ok();
      }
      case WeightSlot::kHcAttnFn:
        return linear(t, layer->attn_hc.fn);
      case WeightSlot::kHcAttnBase:
        return vector(t, layer->attn_hc.base);
      case WeightSlot::kHcAttnScale:
        return vector(t, layer->attn_hc.scale);
      case WeightSlot::kHcFfnFn:
        return linear(t, layer->ffn_hc.fn);
      case WeightSlot::kHcFfnBase:
        return vector(t, layer->ffn_hc.base);
      case WeightSlot::kHcFfnScale:
        return vector(t, layer->ffn_hc.scale);
      default:
        return stacked_experts(t, moe);
    }
  }

  // This rank's part of the dimension `t.shard` splits (`n` elements), the whole of it otherwise.
  ShardRange part(const TensorSpec& t, int64_t n) const {
    const TensorShard shard = out_.shard;
    switch (t.shard.rule) {
      case ShardRule::kColumn:
      case ShardRule::kRow:
        return even_shard(n, shard);
      case ShardRule::kColumnKv: {  // the KV heads of the tensor's layer (some layers have more)
        const ModelSpec& s = b_.spec();
        const int64_t kv = t.layer >= 0 && t.layer < s.n_layers
                               ? layer_kv_heads(s, s.layers[static_cast<size_t>(t.layer)])
                               : s.n_kv_heads;
        return kv_head_shard(n, kv, shard);
      }
      case ShardRule::kVocab:
        return out_.vocab;
      case ShardRule::kExpert:  // expert-TP: each expert's width, like a dense FFN (EP picks experts)
        return even_shard(n, shard);
      case ShardRule::kReplicated:
        break;
    }
    return ShardRange{0, n};
  }

  // The weight of `into` (its bias, bound separately, is kept).
  Status linear(const TensorSpec& t, Linear& into) {
    if (t.shape.size() != 2)
      return internal_error("weight table: a linear weight that is not 2-D: " + t.name);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    Linear l;
    // [out, in]: row-parallel tensors (o, down and each expert's down) split input columns.
    const bool by_columns = t.shard.rule == ShardRule::kRow ||
                            (t.shard.rule == ShardRule::kExpert && t.slot == WeightSlot::kExpertDown);
    if (t.storage == WeightStorage::kFp4Packed) {  // stored [out, in / 2]: two values a byte
      const int64_t in = 2 * cols;
      if (out_.shard.whole()) {
        D0_ASSIGN_OR_RETURN(l, b_.fp4_linear(t.name, rows, in));
      } else if (by_columns) {
        D0_ASSIGN_OR_RETURN(l, b_.fp4_linear_part(t.name, rows, in, {0, rows}, part(t, in)));
      } else {
        D0_ASSIGN_OR_RETURN(l, b_.fp4_linear_part(t.name, rows, in, part(t, rows), {0, in}));
      }
      into.w = l.w;
      return Status::ok();
    }
    if (out_.shard.whole()) {
      D0_ASSIGN_OR_RETURN(l, b_.linear(t.name, rows, cols));
    } else if (by_columns) {
      D0_ASSIGN_OR_RETURN(l, b_.linear_part(t.name, rows, cols, {0, rows}, part(t, cols)));
    } else {  // column, KV-head and vocabulary splits take output rows
      D0_ASSIGN_OR_RETURN(l, b_.linear_part(t.name, rows, cols, part(t, rows), {0, cols}));
    }
    into.w = l.w;
    return Status::ok();
  }
  Status vector(const TensorSpec& t, std::span<const float>& into) {
    if (out_.shard.whole()) {
      D0_ASSIGN_OR_RETURN(into, b_.vector(t.name, numel(t)));
    } else {
      D0_ASSIGN_OR_RETURN(into, b_.vector_part(t.name, numel(t), part(t, numel(t))));
    }
    return Status::ok();
  }
  // An RMSNorm weight; a zero-centred one (zero_centered_norms) is stored as the offset w of the gain 1 + w.
  Status norm(const TensorSpec& t, std::span<const float>& into) {
    D0_RETURN_IF_ERROR(vector(t, into));
    if (b_.spec().zero_centered_norms) into = b_.plus_one(into);
    return Status::ok();
  }
  Status bias(const TensorSpec& t, Linear& into) {
    // The bias of a row-parallel projection (o_proj, down_proj) is added once, by rank 0, before the
    // partial outputs are summed.
    const bool after_row_split = t.slot == WeightSlot::kOBias || t.slot == WeightSlot::kMlpDownBias;
    if (after_row_split && out_.shard.rank != 0) return Status::ok();
    std::span<const float> values;
    D0_RETURN_IF_ERROR(vector(t, values));
    into.bias = values.data();
    return Status::ok();
  }

  Status one_expert(const TensorSpec& t, MoeWeights& moe) {
    if (t.expert < 0 || (b_.spec().moe && t.expert >= b_.spec().moe->n_experts))
      return internal_error(fmt::format("tensor {}: expert {} out of range", t.name, t.expert));
    const int64_t slot = moe.slot_of(t.expert);
    if (slot < 0) return Status::ok();  // another EP rank's: never read here
    ExpertWeights* e = &moe.experts[static_cast<size_t>(slot)];
    Linear l;
    D0_RETURN_IF_ERROR(linear(t, l));
    WeightView& into = t.slot == WeightSlot::kExpertGate ? e->gate
                       : t.slot == WeightSlot::kExpertUp ? e->up
                                                         : e->down;
    into = l.w;
    moe.layout = GateUpLayout::kSeparate;
    return Status::ok();
  }

  // Stacked [E, ...] expert tensors: one view (or transposed copy) per expert this rank holds; under
  // tensor parallelism each expert's share of its width I (expert-TP, as one tensor per expert).
  Status stacked_experts(const TensorSpec& t, MoeWeights& moe) {
    const int64_t n_experts = b_.spec().moe ? b_.spec().moe->n_experts : 0;
    if (t.shape.empty() || t.shape[0] != n_experts) {
      return internal_error(fmt::format("tensor {}: stacked over {} experts, the layer holds {}", t.name,
                                        t.shape.empty() ? 0 : t.shape[0], n_experts));
    }
    const WeightSlot slot = t.slot;
    if (slot == WeightSlot::kExpertsGateUpConcat || slot == WeightSlot::kExpertsGateUpInterleaved ||
        slot == WeightSlot::kExpertsGateUpMxfp4 || slot == WeightSlot::kExpertsGateUpRows) {
      moe.layout = slot == WeightSlot::kExpertsGateUpConcat || slot == WeightSlot::kExpertsGateUpRows
                       ? GateUpLayout::kConcatenated
                       : GateUpLayout::kInterleaved;
    }
    for (int64_t held = 0; held < static_cast<int64_t>(moe.experts.size()); ++held) {
      const int64_t e = moe.expert_of_slot(held);  // block, then replicas (zero-copy views again)
      ExpertWeights& w = moe.experts[static_cast<size_t>(held)];
      if (slot == WeightSlot::kExpertsGateUpConcat || slot == WeightSlot::kExpertsGateUpInterleaved) {
        // Stored x @ W [E, H, 2I]: the kernels read [2I, H] (this rank's rows of it).
        const std::vector<ShardRange> rows = gate_up_rows(moe.layout, t.shape[2] / 2);
        D0_ASSIGN_OR_RETURN(w.gate, b_.stacked_transposed_part(t.name, e, n_experts, t.shape[2], t.shape[1],
                                                               rows, {0, t.shape[1]}));
      } else if (slot == WeightSlot::kExpertsGateUpRows) {  // [E, 2I, H]: this rank's gate and up rows
        const std::vector<ShardRange> rows = gate_up_rows(moe.layout, t.shape[1] / 2);
        D0_ASSIGN_OR_RETURN(
            w.gate, b_.stacked_part(t.name, e, n_experts, t.shape[1], t.shape[2], rows, {0, t.shape[2]}));
      } else if (slot == WeightSlot::kExpertsDownRows) {  // [E, H, I]: this rank's columns
        const ShardRange all_rows{0, t.shape[1]};
        D0_ASSIGN_OR_RETURN(w.down, b_.stacked_part(t.name, e, n_experts, t.shape[1], t.shape[2],
                                                    std::span(&all_rows, 1), width_part(t.shape[2])));
      } else if (slot == WeightSlot::kExpertsDown) {  // [E, I, H] -> [H, I] (this rank's columns)
        const ShardRange all_rows{0, t.shape[2]};
        D0_ASSIGN_OR_RETURN(w.down,
                            b_.stacked_transposed_part(t.name, e, n_experts, t.shape[2], t.shape[1],
                                                       std::span(&all_rows, 1), width_part(t.shape[1])));
      } else if (slot == WeightSlot::kExpertsGateUpMxfp4 || slot == WeightSlot::kExpertsDownMxfp4) {
        // Blocks [E, rows, cols / 32, 16] beside `_scales` [E, rows, cols / 32].
        const std::string stem = strip_suffix(t.name, "_blocks");
        const int64_t rows = t.shape[1], cols = t.shape[2] * 32;
        if (slot == WeightSlot::kExpertsGateUpMxfp4) {  // interleaved [2I, H]: one run of rows
          const ShardRange r = gate_up_rows(GateUpLayout::kInterleaved, rows / 2).front();
          D0_ASSIGN_OR_RETURN(w.gate, b_.mxfp4_part(stem, e, n_experts, rows, cols, r, {0, cols}));
        } else {  // [H, I]: this rank's columns
          D0_ASSIGN_OR_RETURN(w.down,
                              b_.mxfp4_part(stem, e, n_experts, rows, cols, {0, rows}, width_part(cols)));
        }
      } else if (slot == WeightSlot::kExpertsGateUpBias) {  // [E, 2I] in the gate_up's row order
        const std::vector<ShardRange> parts = gate_up_rows(moe.layout, t.shape[1] / 2);
        D0_ASSIGN_OR_RETURN(w.gate_bias, b_.stacked_vector_part(t.name, e, n_experts, t.shape[1], parts));
      } else if (slot == WeightSlot::kExpertsDownBias) {
        // Added after the down projection: once, by TP rank 0, like a row-parallel bias.
        if (out_.shard.rank != 0) continue;
        D0_ASSIGN_OR_RETURN(w.down_bias, b_.stacked_vector(t.name, e, n_experts, t.shape[1]));
      } else {
        return internal_error(
            fmt::format("tensor {}: slot {} has no binding", t.name, static_cast<int>(slot)));
      }
    }
    return Status::ok();
  }

  // This rank's columns of an expert width of `n` (all of them in one process).
  ShardRange width_part(int64_t n) const { return even_shard(n, out_.shard); }

  // This rank's rows of a fused gate_up of width `inter` ([2 * inter] rows): its gate and up rows,
  // one run when they alternate, two (gate, then up) when concatenated.
  std::vector<ShardRange> gate_up_rows(GateUpLayout layout, int64_t inter) const {
    const ShardRange j = width_part(inter);
    if (layout == GateUpLayout::kInterleaved) return {{2 * j.begin, 2 * j.end}};
    return {{j.begin, j.end}, {inter + j.begin, inter + j.end}};
  }

  WeightBinder& b_;
  ModelWeights& out_;
  int64_t first_layer_ = 0;
  std::map<int64_t, int> conv_parts_;  // per layer: how many of the conv's q / k / v parts are bound
};

// The checkpoint's multi-token-prediction layers, each bound as a one-layer model (ModelWeights::mtp). A
// layer of the eh_proj layout may leave out its embed_tokens and shared_head.head: the main model's serve.
Status bind_mtp_layers(const ModelSpec& spec, const TensorManifest& manifest, ModelWeights& out) {
  if (spec.n_mtp_layers == 0) {
    std::string elsewhere;  // an MTP module the config does not count (e.g. a model.mtp.* module)
    for (const std::string& name : out.source->names()) {
      if (name.starts_with("mtp.") || name.find(".mtp.") != std::string::npos) {
        elsewhere = name;
        break;
      }
    }
    if (!elsewhere.empty()) {
      return unsupported(fmt::format(
          "{} holds a multi-token-prediction module ({}) outside DeepSeek-V3's layout "
          "(model.layers.{}.eh_proj and its companions, counted by num_nextn_predict_layers): drafting "
          "with it is not built yet",
          spec.family, elsewhere, spec.n_layers));
    }
    return invalid_argument(fmt::format(
        "the checkpoint has no multi-token-prediction layers: config.json's num_nextn_predict_layers is 0 or "
        "absent, so no model.layers.{}.eh_proj / enorm / hnorm / shared_head tensors are read",
        spec.n_layers));
  }
  for (int64_t k = 0; k < spec.n_mtp_layers; ++k) {
    const int64_t table_layer = spec.n_layers + k;
    // The layout is the family's, read off its weight table before any tensor is looked for: DeepSeek-V3's
    // eh_proj, or DeepSeek-V4's e_proj / h_proj over hyper-connection streams.
    const bool known_layout =
        std::any_of(manifest.tensors.begin(), manifest.tensors.end(), [&](const TensorSpec& t) {
          return t.mtp && t.layer == table_layer &&
                 (t.slot == WeightSlot::kMtpProjection ||
                  (t.slot == WeightSlot::kMtpHiddenProjection && spec.hyper_connections));
        });
    if (!known_layout) {
      return unsupported(
          fmt::format("{}: its multi-token-prediction layers are not laid out as DeepSeek-V3's (enorm, "
                      "hnorm, eh_proj and shared_head in model.layers.{}) or DeepSeek-V4's (mtp.N.e_proj / "
                      "h_proj over hyper-connection streams): drafting with them is not built yet",
                      spec.family, table_layer));
    }
    auto sub = std::make_shared<ModelWeights>();
    sub->vocab = out.vocab;
    sub->held_layers = {0, 1};
    sub->source = out.source;
    sub->layers.resize(1);
    if (mtp_layer_spec(spec).moe && spec.moe)
      sub->layers[0].moe.experts.resize(static_cast<size_t>(spec.moe->n_experts));
    WeightBinder b(spec, *sub);
    TableBinder table(b, *sub, table_layer);
    for (const TensorSpec& t : manifest.tensors) {
      if (!t.mtp || t.layer != table_layer) continue;
      // Shared with the main model when the layer stores no copy of its own.
      if ((t.slot == WeightSlot::kEmbedding || t.slot == WeightSlot::kLmHead) && !b.has(t.name)) continue;
      D0_RETURN_IF_ERROR(table.bind(t));
    }
    if (sub->embedding.data == nullptr) sub->embedding = out.embedding;
    if (!sub->lm_head.present()) sub->lm_head = out.lm_head;
    out.mtp.push_back(std::move(sub));
  }
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<ModelWeights>> bind_model_weights(const ModelSpec& model_spec,
                                                         std::shared_ptr<const TensorSource> source,
                                                         TensorShard shard, ExpertShard experts,
                                                         PipelineStage stage, bool mtp_layers) {
  if (static_cast<int64_t>(model_spec.layers.size()) != model_spec.n_layers) {
    return invalid_argument(fmt::format("model spec lists {} layers, expected {}", model_spec.layers.size(),
                                        model_spec.n_layers));
  }
  ModelSpec spec = model_spec;
  // Multimodal releases keep the text model under language_model.
  if (!spec.multimodal_wrapper && !source->contains("model.embed_tokens.weight") &&
      source->contains("language_model.model.embed_tokens.weight")) {
    spec.multimodal_wrapper = true;
  }
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(spec));
  // A checkpoint under another layout of the table's names (a release's own, stored_layout.h): read
  // through views under the table's names.
  if (const StoredLayout* layout =
          stored_layout_in_use(manifest, [&](const std::string& name) { return source->contains(name); })) {
    source = stored_layout_source(std::move(source), manifest, *layout);
  }
  if (shard.size < 1 || shard.rank < 0 || shard.rank >= shard.size)
    return invalid_argument(fmt::format("tensor-parallel rank {} of {}", shard.rank, shard.size));
  if (!shard.whole()) D0_RETURN_IF_ERROR(check_tensor_parallel(spec, shard.size));
  if (experts.size < 1 || experts.rank < 0 || experts.rank >= experts.size)
    return invalid_argument(fmt::format("expert-parallel rank {} of {}", experts.rank, experts.size));
  if (!experts.whole()) D0_RETURN_IF_ERROR(check_expert_parallel(spec, experts.size));
  if (stage.size < 1 || stage.stage < 0 || stage.stage >= stage.size)
    return invalid_argument(fmt::format("pipeline stage {} of {}", stage.stage, stage.size));
  if (!stage.whole()) D0_RETURN_IF_ERROR(check_pipeline_parallel(spec, stage.size));
  auto out = std::make_shared<ModelWeights>();
  out->shard = shard;
  out->expert_shard = experts;
  out->stage = stage;
  const dist::LayerBlock held_layers = dist::stage_layers(spec.n_layers, stage.size, stage.stage);
  out->held_layers = {held_layers.begin, held_layers.end};
  out->vocab = vocab_shard(spec.vocab_size, shard);
  out->source = std::move(source);
  out->layers.resize(static_cast<size_t>(spec.n_layers));
  for (int64_t n = held_layers.begin; n < held_layers.end; ++n) {
    if (spec.layers[static_cast<size_t>(n)].moe && spec.moe) {
      MoeWeights& moe = out->layers[static_cast<size_t>(n)].moe;
      if (experts.whole()) {
        moe.experts.resize(static_cast<size_t>(spec.moe->n_experts));
        continue;
      }
      // This rank's block, then its replicas of other ranks' experts.
      std::shared_ptr<const dist::LayerExpertPlacement> placement;
      if (experts.placement != nullptr) {
        if (static_cast<int64_t>(experts.placement->layers.size()) != spec.n_layers ||
            experts.placement->layers[static_cast<size_t>(n)].ep() != experts.size ||
            experts.placement->layers[static_cast<size_t>(n)].n_experts() != spec.moe->n_experts) {
          return invalid_argument(
              fmt::format("expert placement of layer {} is not one of {} experts over EP {}", n,
                          spec.moe->n_experts, experts.size));
        }
        placement = std::shared_ptr<const dist::LayerExpertPlacement>(
            experts.placement, &experts.placement->layers[static_cast<size_t>(n)]);
      } else {
        placement = std::make_shared<const dist::LayerExpertPlacement>(
            dist::place_layer_experts(spec.moe->n_experts, experts.size, 0));
      }
      moe.held_experts = placement->held[static_cast<size_t>(experts.rank)];
      moe.expert_slot.assign(static_cast<size_t>(spec.moe->n_experts), -1);
      for (size_t slot = 0; slot < moe.held_experts.size(); ++slot)
        moe.expert_slot[static_cast<size_t>(moe.held_experts[slot])] = static_cast<int32_t>(slot);
      moe.experts.resize(moe.held_experts.size());
      moe.placement = std::move(placement);
    }
  }
  WeightBinder b(spec, *out);
  TableBinder table(b, *out);
  const std::string context = fmt::format("binding {} weights", spec.family);
  // Tied: the head is the embedding, unless the checkpoint stores a copy anyway.
  const std::string head = spec.multimodal_wrapper ? "language_model.lm_head.weight" : "lm_head.weight";
  const bool tied_head_from_embedding = spec.tie_word_embeddings && !b.has(head);
  // What this pipeline stage maps: its layers, the embedding on the first stage, the final norm and the
  // head on the last; the other stages' tensors are never read here.
  auto held = [&](const TensorSpec& t) {
    if (t.layer >= 0) return t.layer >= held_layers.begin && t.layer < held_layers.end;
    if (t.slot == WeightSlot::kEmbedding) return stage.first() || (stage.last() && tied_head_from_embedding);
    if (t.slot == WeightSlot::kLmHead || t.slot == WeightSlot::kFinalNorm ||
        t.slot == WeightSlot::kHcHeadFn || t.slot == WeightSlot::kHcHeadBase ||
        t.slot == WeightSlot::kHcHeadScale)
      return stage.last();
    return true;
  };
  for (const TensorSpec& t : manifest.tensors) {
    if (t.mtp) continue;  // multi-token-prediction layers: plain decoding never reads them
    if (!held(t)) continue;
    if (Status st = table.bind(t); !st.is_ok()) return st.with_context(context);
  }
  if (spec.tie_word_embeddings && stage.last()) {
    if (b.has(head)) {
      const uint64_t before = b.bytes_bound();
      auto l = b.linear_part(head, spec.vocab_size, spec.hidden_size, out->vocab, {0, spec.hidden_size});
      if (!l.is_ok()) return l.status().with_context(context);
      out->lm_head = *l;
      out->bound.split += b.bytes_bound() - before;
    } else {
      out->lm_head.w = out->embedding;
      // A last stage that is not the first maps the embedding only as its head.
      if (!stage.first()) out->embedding = {};
    }
  }
  if (mtp_layers) {
    if (!shard.whole() || !experts.whole() || !stage.whole()) {
      return unsupported(
          "multi-token-prediction layers under tensor, expert or pipeline parallelism: not yet (one "
          "process)");
    }
    if (Status st = bind_mtp_layers(spec, manifest, *out); !st.is_ok()) return st.with_context(context);
  }
  return out;
}

}  // namespace day0
