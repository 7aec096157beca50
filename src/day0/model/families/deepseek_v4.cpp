// DeepseekV4ForCausalLM (DeepSeek-V4 Flash / Pro) as transformers 5.25's DeepseekV4Config reads it, the
// release's legacy keys (compress_ratios, compress_rate_csa / _hca, num_hash_layers, qk_rope_head_dim,
// rope_scaling beside compress_rope_theta) folded in as the class folds them. Mechanisms: model_spec.h.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/tensor_manifest.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

constexpr const char* kImplementation = "transformers' DeepSeek-V4";

// The compressed layers' RoPE: rope_parameters.compress (transformers 5), else the legacy rope_scaling at
// compress_rope_theta. YaRN there has attention factor 1 unless given (the reference scales no cos / sin).
Result<LayerRope> parse_compress_rope(const ConfigReader& cfg, const ModelSpec& spec,
                                      const std::optional<ConfigReader>& nested) {
  ModelSpec kind = spec;  // the sizes a derived YaRN factor reads
  kind.rope = RopeScaling{};
  std::optional<ConfigReader> scaling = nested;
  if (nested) {
    D0_ASSIGN_OR_RETURN(kind.rope_theta, nested->optional_double("rope_theta", 160000.0));
  } else {
    D0_ASSIGN_OR_RETURN(kind.rope_theta, cfg.optional_double("compress_rope_theta", 160000.0));
    D0_ASSIGN_OR_RETURN(scaling, cfg.optional_object("rope_parameters"));
    if (!scaling) {
      D0_ASSIGN_OR_RETURN(scaling, cfg.optional_object("rope_scaling"));
    }
    if (scaling) scaling->mark_used("rope_theta");  // the class overrides it with compress_rope_theta
  }
  if (scaling) D0_RETURN_IF_ERROR(parse_rope_parameters_object(*scaling, kind));
  if (kind.partial_rotary_factor != spec.partial_rotary_factor) {
    return cfg.invalid("rope_parameters",
                       fmt::format("the compressed layers' partial_rotary_factor {} differs "
                                   "from the model's {}",
                                   kind.partial_rotary_factor, spec.partial_rotary_factor));
  }
  if (!(kind.rope_theta > 0.0)) return cfg.mismatch("compress_rope_theta", "a positive number");
  if (kind.rope.type == RopeType::kYarn && !kind.rope.attention_factor) kind.rope.attention_factor = 1.0;
  return LayerRope{kind.rope_theta, spec.partial_rotary_factor, kind.rope};
}

// partial_rotary_factor, else the legacy qk_rope_head_dim / head_dim, else 64 / 512; both given must agree.
Status parse_rotary(const ConfigReader& cfg, const std::optional<ConfigReader>& main, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(int64_t rope_dims, cfg.optional_int("qk_rope_head_dim", 0, 0, spec.head_dim));
  double factor = rope_dims > 0 ? static_cast<double>(rope_dims) / static_cast<double>(spec.head_dim) : 0.125;
  if (main) {
    D0_ASSIGN_OR_RETURN(factor, main->optional_double("partial_rotary_factor", factor));
  }
  D0_ASSIGN_OR_RETURN(factor, cfg.optional_double("partial_rotary_factor", factor));
  if (!(factor > 0.0 && factor <= 1.0)) return cfg.mismatch("partial_rotary_factor", "a number in (0, 1]");
  if (rope_dims > 0 && rotary_dims(spec.head_dim, factor) != rope_dims) {
    return cfg.invalid("qk_rope_head_dim",
                       fmt::format("{} disagrees with partial_rotary_factor {} x head_dim {}", rope_dims,
                                   factor, spec.head_dim));
  }
  spec.partial_rotary_factor = factor;
  spec.rope_layout = RopeLayout::kInterleaved;
  if (!main) return Status::ok();
  D0_ASSIGN_OR_RETURN(spec.rope_theta, main->optional_double("rope_theta", spec.rope_theta));
  D0_ASSIGN_OR_RETURN(std::string type, main->optional_string("rope_type", "default"));
  if (type != "default") return main->mismatch("rope_type", "\"default\" (the sliding layers' plain RoPE)");
  return Status::ok();
}

Status parse_moe(const ConfigReader& cfg, ModelSpec& spec) {
  MoeSpec m;
  D0_ASSIGN_OR_RETURN(m.n_experts,
                      aliased_int(cfg, {"n_routed_experts", "num_local_experts"}, 1, kMaxExperts, 256));
  D0_ASSIGN_OR_RETURN(m.experts_per_token, cfg.optional_int("num_experts_per_tok", 6, 1, m.n_experts));
  m.expert_intermediate = spec.intermediate_size;
  // One shared expert of the routed experts' width, whatever n_shared_experts says (DeepseekV4MLP).
  D0_RETURN_IF_ERROR(require_released(cfg, "n_shared_experts", 1, kImplementation));
  m.n_shared_experts = 1;
  m.shared_intermediate = m.expert_intermediate;
  D0_ASSIGN_OR_RETURN(std::string scoring, cfg.optional_string("scoring_func", "sqrtsoftplus"));
  if (scoring != "sqrtsoftplus" && scoring != "sigmoid")
    return cfg.mismatch("scoring_func", "\"sqrtsoftplus\" or \"sigmoid\"");
  m.scoring = scoring == "sigmoid" ? RouterScoring::kSigmoid : RouterScoring::kSqrtSoftplus;
  // The router always renormalises the top-k and adds the correction bias for selection only.
  D0_RETURN_IF_ERROR(require_released(cfg, "norm_topk_prob", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "topk_method", "noaux_tc", kImplementation));
  m.norm_topk_prob = true;
  m.topk_method = TopkMethod::kNoauxTc;
  m.correction_bias = true;
  D0_ASSIGN_OR_RETURN(m.routed_scaling_factor, cfg.optional_double("routed_scaling_factor", 1.5));
  D0_ASSIGN_OR_RETURN(m.swiglu_limit, cfg.optional_double("swiglu_limit", 10.0));
  m.swiglu_plain_clamp = true;
  spec.moe = m;
  return Status::ok();
}

}  // namespace

Status parse_deepseek_v4(const ConfigReader& cfg, ModelSpec& spec) {
  // The class's attribute_map, and its defaults for what parse_core requires.
  D0_ASSIGN_OR_RETURN(nlohmann::json merged,
                      with_canonical_keys(cfg, {{"intermediate_size", "moe_intermediate_size"}}));
  for (auto [key, value] : {std::pair<const char*, int64_t>{"vocab_size", 129280},
                            {"hidden_size", 4096},
                            {"moe_intermediate_size", 2048},
                            {"num_hidden_layers", 43},
                            {"num_attention_heads", 64},
                            {"num_key_value_heads", 1},
                            {"head_dim", 512}}) {
    if (!merged.contains(key) || merged[key].is_null()) merged[key] = value;
  }
  merged["intermediate_size"] = merged["moe_intermediate_size"];
  for (const char* key : {"rope_parameters", "rope_scaling", "partial_rotary_factor"}) merged.erase(key);
  const ConfigReader core = cfg.derived(merged, "");
  FamilyDefaults defaults;  // DeepseekV4Config
  defaults.rms_norm_eps = 1e-6;
  defaults.max_position_embeddings = 1048576;
  defaults.head_dim = 512;
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  // The routed experts' width is also the shared expert's (intermediate_size is its alias).
  D0_ASSIGN_OR_RETURN(spec.intermediate_size, core.required_int("moe_intermediate_size"));
  D0_RETURN_IF_ERROR(require_released(cfg, "num_key_value_heads", 1, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "attention_bias", false, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "mlp_bias", false, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "hidden_act", "silu", kImplementation));
  spec.attention_sinks = true;

  std::optional<ConfigReader> main, compress;
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> params, cfg.optional_object("rope_parameters"));
  if (params && params->contains("main") && params->contains("compress")) {
    D0_ASSIGN_OR_RETURN(main, params->optional_object("main"));
    D0_ASSIGN_OR_RETURN(compress, params->optional_object("compress"));
    ignore_keys(cfg, {"compress_rope_theta", "rope_scaling"});  // the class drops them for the nested form
  }
  D0_RETURN_IF_ERROR(parse_rotary(cfg, main, spec));
  spec.rope = RopeScaling{};  // the sliding layers' RoPE is plain
  D0_ASSIGN_OR_RETURN(LayerRope compressed_rope, parse_compress_rope(cfg, spec, compress));

  D0_RETURN_IF_ERROR(parse_compressed_kv_layer_types(cfg, spec));
  D0_RETURN_IF_ERROR(parse_hash_moe_layer_types(cfg, spec));
  D0_RETURN_IF_ERROR(parse_moe(core, spec));
  D0_ASSIGN_OR_RETURN(spec.n_mtp_layers, cfg.optional_int("num_nextn_predict_layers", 1, 0, 64));

  SharedKvLowRankAttentionSpec attn;
  D0_ASSIGN_OR_RETURN(attn.q_lora_rank, cfg.optional_int("q_lora_rank", 1024, 1));
  D0_ASSIGN_OR_RETURN(attn.out_groups, cfg.optional_int("o_groups", 8, 1, spec.n_heads));
  D0_ASSIGN_OR_RETURN(attn.out_rank, cfg.optional_int("o_lora_rank", 1024, 1));
  if (spec.n_heads % attn.out_groups != 0) {
    return cfg.invalid("o_groups", fmt::format("must divide num_attention_heads ({}), found {}", spec.n_heads,
                                               attn.out_groups));
  }
  spec.shared_kv_low_rank = attn;
  CompressedKvSpec ckv;
  D0_ASSIGN_OR_RETURN(ckv.index_n_heads, cfg.optional_int("index_n_heads", 64, 1));
  D0_ASSIGN_OR_RETURN(ckv.index_head_dim, cfg.optional_int("index_head_dim", 128, 2));
  D0_ASSIGN_OR_RETURN(ckv.index_topk, cfg.optional_int("index_topk", 512, 1));
  ckv.rope = compressed_rope;
  spec.compressed_kv = ckv;
  HyperConnectionSpec hc;
  D0_ASSIGN_OR_RETURN(hc.streams, cfg.optional_int("hc_mult", 4, 1, 64));
  D0_ASSIGN_OR_RETURN(hc.sinkhorn_iters, cfg.optional_int("hc_sinkhorn_iters", 20, 1, 1000));
  D0_ASSIGN_OR_RETURN(hc.eps, cfg.optional_double("hc_eps", 1e-6));
  spec.hyper_connections = hc;
  ignore_keys(cfg, {"output_router_logits", "router_aux_loss_coef", "router_jitter_noise"});
  return Status::ok();
}

void write_deepseek_v4(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  for (const char* key : {"intermediate_size", "rope_scaling"}) out.erase(key);
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["n_routed_experts"] = moe.n_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["n_shared_experts"] = 1;
  out["scoring_func"] = moe.scoring == RouterScoring::kSigmoid ? "sigmoid" : "sqrtsoftplus";
  out["norm_topk_prob"] = true;
  out["routed_scaling_factor"] = moe.routed_scaling_factor;
  out["swiglu_limit"] = moe.swiglu_limit;
  out["num_nextn_predict_layers"] = spec.n_mtp_layers;
  out["q_lora_rank"] = spec.shared_kv_low_rank->q_lora_rank;
  out["o_groups"] = spec.shared_kv_low_rank->out_groups;
  out["o_lora_rank"] = spec.shared_kv_low_rank->out_rank;
  const CompressedKvSpec& ckv = *spec.compressed_kv;
  out["index_n_heads"] = ckv.index_n_heads;
  out["index_head_dim"] = ckv.index_head_dim;
  out["index_topk"] = ckv.index_topk;
  out["hc_mult"] = spec.hyper_connections->streams;
  out["hc_sinkhorn_iters"] = spec.hyper_connections->sinkhorn_iters;
  out["hc_eps"] = spec.hyper_connections->eps;
  out["partial_rotary_factor"] = spec.partial_rotary_factor;
  write_compressed_kv_layer_types(spec, out);
  ModelSpec compress = spec;
  compress.rope = ckv.rope.scaling;
  nlohmann::json compress_rope = write_rope_scaling(compress);
  if (compress_rope.is_null()) compress_rope = {{"rope_type", "default"}};
  compress_rope.erase("type");
  compress_rope["rope_theta"] = ckv.rope.theta;
  compress_rope["partial_rotary_factor"] = spec.partial_rotary_factor;
  out["rope_parameters"] = {{"main",
                             {{"rope_type", "default"},
                              {"rope_theta", spec.rope_theta},
                              {"partial_rotary_factor", spec.partial_rotary_factor}}},
                            {"compress", compress_rope}};
  out["rope_theta"] = spec.rope_theta;
  out["compress_rope_theta"] = ckv.rope.theta;
}

namespace {

// One decoder (or MTP) layer's tensors in transformers 5.25's saved names (scope "model.layers.{L}.").
void layer_weights(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec& l) {
  using namespace weights;
  const int64_t H = s.hidden_size, E = s.moe->n_experts;
  shared_kv_low_rank_attention(s, b, l);
  b.add("attn_norm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, kReplicated,
        WeightSlot::kInputNorm);
  b.add("ffn.gate.weight", {E, H}, WeightStorage::kKeptF32, TensorRole::kRouter, kReplicated,
        WeightSlot::kRouter);
  if (l.hash_routed) {
    b.add("ffn.gate.tid2eid", {s.vocab_size, s.moe->experts_per_token}, WeightStorage::kI64,
          TensorRole::kRouter, kReplicated, WeightSlot::kHashRoutingTable);
  } else {
    b.add("ffn.gate.bias", {E}, WeightStorage::kF32, TensorRole::kRouter, kReplicated,
          WeightSlot::kCorrectionBias);
  }
  separate_experts(s, b, "ffn.experts.{E}.", {"w1", "w3", "w2"});
  shared_expert(s, b, "ffn.shared_experts.", s.moe->shared_intermediate, {"w1", "w3", "w2"});
  b.add("ffn_norm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, kReplicated,
        WeightSlot::kPostNorm);
  hyper_connection(s, b, "hc_attn_fn", "hc_attn_base", "hc_attn_scale", kHcAttnSlots);
  hyper_connection(s, b, "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", kHcFfnSlots);
}

// The release's own names (DeepSeek's inference code): no "model." prefix, embed / norm / hc_head_* at the
// top, the key norm as kv_norm, block scales as `<module>.scale` in E8M0 bytes (when scale_fmt is ue8m0).
StoredLayout release_layout() {
  StoredLayout r{.name = "DeepSeek-V4 release", .release = true, .fp8_block_scale_dtype = DType::kF8E8M0};
  for (auto [canonical, stored] :
       {std::pair<const char*, const char*>{"model.embed_tokens.weight", "embed.weight"},
        {"model.layers.", "layers."},
        {"model.norm.weight", "norm.weight"},
        {"model.hc_head.hc_", "hc_head_"}}) {
    r.renames.push_back(NameRename{canonical, stored, true});
  }
  r.renames.push_back(NameRename{".attn.norm.weight", ".attn.kv_norm.weight", false});
  r.renames.push_back(NameRename{".weight_scale_inv", ".scale", false});
  return r;
}

}  // namespace

// transformers 5.25's save names the head `head.weight`, the rest under "model.", the MTP layers (dropped by
// transformers) under the release's "mtp.{i}.". An MTP layer (V4 inference code's MTPBlock; forward_mtp)
// reads the main model's last-layer streams h_t, uncollapsed, and x_{t+1}: stream j = h_proj(hnorm(h_t[j])) +
// e_proj(enorm(embed(x_{t+1}))); then its layer (mtp_layer_spec), own hc_head_* and norm, the main head.
void weights_deepseek_v4(const ModelSpec& s, WeightTableBuilder& b) {
  using namespace weights;
  const int64_t H = s.hidden_size;
  b.add("embed_tokens.weight", {s.vocab_size, H}, WeightStorage::kPlain, TensorRole::kEmbedding, kVocab,
        WeightSlot::kEmbedding);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    b.begin_layer(l);
    layer_weights(s, b, s.layers[static_cast<size_t>(l)]);
    b.end_layer();
  }
  b.add("norm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, kReplicated, WeightSlot::kFinalNorm);
  hyper_connection(s, b, "hc_head.hc_fn", "hc_head.hc_base", "hc_head.hc_scale", kHcHeadSlots, true);
  if (!s.tie_word_embeddings) {
    b.add_absolute("head.weight", {s.vocab_size, H}, WeightStorage::kPlain, TensorRole::kLmHead, kVocab,
                   WeightSlot::kLmHead);
  }
  const LayerSpec mtp = mtp_layer_spec(s);
  for (int64_t i = 0; i < s.n_mtp_layers; ++i) {
    b.begin_mtp_scope(s.n_layers + i, fmt::format("mtp.{}.", i));
    layer_weights(s, b, mtp);
    using enum WeightSlot;
    for (auto [name, slot] :
         {std::pair{"e_proj.weight", kMtpEmbeddingProjection}, {"h_proj.weight", kMtpHiddenProjection}})
      b.add(name, {H, H}, WeightStorage::kProjection, TensorRole::kAttention, kReplicated, slot);
    for (auto [name, slot] : {std::pair{"enorm.weight", kMtpEmbeddingNorm},
                              {"hnorm.weight", kMtpHiddenNorm},
                              {"norm.weight", kFinalNorm}})
      b.add(name, {H}, WeightStorage::kKeptF32, TensorRole::kNorm, kReplicated, slot);
    hyper_connection(s, b, "hc_head_fn", "hc_head_base", "hc_head_scale", kHcHeadSlots, true);
    b.end_layer();
  }
  b.stored_layout(release_layout());
}

const FamilyRegistrar kFamily({
    .model_types = {"deepseek_v4"},
    .architectures = {"DeepseekV4ForCausalLM"},
    .summary = "shared K=V MQA with sliding, compressed sparse and heavily compressed KV, hyper-connections, "
               "hash-routed + sqrtsoftplus MoE",
    .parse = parse_deepseek_v4,
    .write = write_deepseek_v4,
    .weights = weights_deepseek_v4,
    .layer_recipe = hyper_connection_layer_recipe,
});

}  // namespace day0::families
