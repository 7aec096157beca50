#include "day0/model/model_summary.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <cmath>

#include "day0/ops/tensor.h"

#include "day0/model/packed_int_config.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {

Result<ModelSummary> summarize_model(const ModelSpec& spec, std::string source, OpList ops) {
  ModelSummary s;
  s.spec = spec;
  s.source = std::move(source);
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(spec));
  s.n_tensors = static_cast<int64_t>(
      std::count_if(manifest.tensors.begin(), manifest.tensors.end(), [](const auto& t) { return !t.mtp; }));
  D0_ASSIGN_OR_RETURN(s.params, count_params(spec, manifest));
  s.weight_memory = weight_memory_table(spec, s.params);
  s.kv_cache = kv_cache_summary(spec);
  s.ops = std::move(ops);
  const std::vector<LayerRecipe> recipes = layer_recipes(spec);
  for (size_t l = 0; l < recipes.size(); ++l) {
    auto same = std::find_if(s.recipes.begin(), s.recipes.end(),
                             [&](const ModelSummary::RecipeGroup& g) { return g.recipe == recipes[l]; });
    if (same == s.recipes.end()) same = s.recipes.insert(s.recipes.end(), {{}, recipes[l]});
    same->layers.push_back(static_cast<int64_t>(l));
  }
  return s;
}

namespace {

const char* scoring_name(RouterScoring scoring) {
  switch (scoring) {
    case RouterScoring::kSoftmax:
      return "softmax";
    case RouterScoring::kSigmoid:
      return "sigmoid";
    case RouterScoring::kSqrtSoftplus:
      return "sqrtsoftplus";
  }
  return "unknown";
}

}  // namespace

std::string describe_layer_indices(const std::vector<int64_t>& v) {
  if (v.empty()) return "none";
  if (v.size() == 1) return std::to_string(v[0]);
  const int64_t step = v[1] - v[0];
  bool progression = step > 0;
  for (size_t i = 2; i < v.size() && progression; ++i) progression = v[i] - v[i - 1] == step;
  if (progression) {
    if (step == 1) return fmt::format("{}-{}", v.front(), v.back());
    return fmt::format("{}-{} every {}", v.front(), v.back(), step);
  }
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 8) return out + ", ...";
    if (i > 0) out += ", ";
    out += std::to_string(v[i]);
  }
  return out;
}

namespace {

// Shared key = value head attention (SharedKvLowRankAttentionSpec), its layers by kind of KV: window of
// raw keys only, compressed sparse, heavily compressed (CompressedKvSpec), each kind's count and ratios.
std::string describe_shared_kv_attention(const ModelSpec& s) {
  const SharedKvLowRankAttentionSpec& a = *s.shared_kv_low_rank;
  std::string out = fmt::format(
      "one shared key = value head x {}, {} query heads from a rank-{} latent, output in {} groups "
      "of rank {}, scale {:.6f}",
      s.head_dim, s.n_heads, a.q_lora_rank, a.out_groups, a.out_rank, s.attention_scale);
  if (s.attention_sinks) out += ", sinks";
  int64_t window_only = 0, sparse = 0, heavy = 0, window = 0;
  std::vector<int64_t> sparse_ratios, heavy_ratios;
  for (const LayerSpec& l : s.layers) {
    if (l.mask != AttentionMask::kCausal) window = std::max(window, l.window);
    if (l.kv_compress_ratio <= 0) {
      ++window_only;
      continue;
    }
    ++(l.compressed_sparse ? sparse : heavy);
    std::vector<int64_t>& ratios = l.compressed_sparse ? sparse_ratios : heavy_ratios;
    if (std::find(ratios.begin(), ratios.end(), l.kv_compress_ratio) == ratios.end())
      ratios.push_back(l.kv_compress_ratio);
  }
  const auto per = [](const std::vector<int64_t>& ratios) {
    return fmt::format("1 entry / {} tokens", fmt::join(ratios, " or "));
  };
  out += window > 0
             ? fmt::format("; every layer a window of {} raw keys: {} window only", window, window_only)
             : fmt::format("; {} full causal", window_only);
  if (sparse > 0) {
    out += fmt::format(", {} compressed sparse ({}", sparse, per(sparse_ratios));
    if (s.compressed_kv) {
      const CompressedKvSpec& c = *s.compressed_kv;
      out += fmt::format(", top {} by a {} x {} indexer", c.index_topk, c.index_n_heads, c.index_head_dim);
    }
    out += ")";
  }
  if (heavy > 0) out += fmt::format(", {} heavily compressed ({})", heavy, per(heavy_ratios));
  return out;
}

}  // namespace

std::string describe_attention(const ModelSpec& s) {
  if (s.shared_kv_low_rank) return describe_shared_kv_attention(s);
  if (s.attention == AttentionKind::kMla) {
    const MlaSpec& m = *s.mla;
    return fmt::format("MLA, {} heads, q_lora {}, kv_lora {}, qk {} nope + {} rope, v {}, scale {:.6f}",
                       s.n_heads, m.q_lora_rank > 0 ? std::to_string(m.q_lora_rank) : std::string("none"),
                       m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim,
                       s.attention_scale);
  }
  std::string out = fmt::format("GQA, {} heads / {} KV heads x {}, scale {:.6f}", s.n_heads, s.n_kv_heads,
                                s.head_dim, s.attention_scale);
  if (s.qkv_bias) out += s.o_bias ? ", q/k/v/o bias" : ", q/k/v bias";
  if (s.qk_norm) out += s.qk_norm_full_width ? ", q/k RMSNorm over all heads" : ", q/k RMSNorm";
  if (s.qk_norm_weightless_after_rope) out += ", q/k L2 norm after RoPE";
  if (s.attention_sinks) out += ", sinks";
  if (value_head_dim(s) != s.head_dim) out += fmt::format(", values x {}", value_head_dim(s));
  if (s.value_scale != 1.0) out += fmt::format(", values x {:g} scale", s.value_scale);
  for (const LayerSpec& l : s.layers) {
    if (layer_heads(s, l) != s.n_heads || layer_kv_heads(s, l) != s.n_kv_heads) {
      out += ", per-layer head counts";
      break;
    }
  }
  for (const LayerSpec& l : s.layers) {
    if (l.head_dim > 0 && l.head_dim != s.head_dim) {
      out += fmt::format(", {}-wide heads in some layers", l.head_dim);
      break;
    }
  }
  if (std::any_of(s.layers.begin(), s.layers.end(), [](auto& l) { return l.values_from_keys; }))
    out += ", values = keys in some layers";
  if (s.value_norm) out += ", weightless value norm";
  if (const auto shared =
          std::count_if(s.layers.begin(), s.layers.end(), [](auto& l) { return l.kv_source >= 0; }))
    out += fmt::format(", {} layers reuse an earlier layer's KV", shared);
  if (s.output_gate != OutputGate::kNone) {
    out +=
        fmt::format(", {} output gate per {}", s.output_gate == OutputGate::kSigmoid ? "sigmoid" : "softplus",
                    s.output_gate_per_head ? "head" : "element");
  }
  if (s.sandwich_norms) out += ", sandwich norms";
  if (s.attention_post_norms) out += ", output norms only (OLMo 2)";
  if (s.block_indexer) {
    const BlockIndexerSpec& ix = *s.block_indexer;
    const auto sparse =
        std::count_if(s.layers.begin(), s.layers.end(), [](auto& l) { return l.block_sparse; });
    out +=
        fmt::format(", block-sparse in {} layers (top {} blocks of {} keys, {} local; {} index heads x {})",
                    sparse, ix.topk_blocks, ix.block_size, ix.local_blocks, ix.n_heads, ix.head_dim);
  }
  return out;
}

std::string describe_rope(const ModelSpec& s) {
  const RopeScaling& r = s.rope;
  const bool whole = s.rope_theta == std::floor(s.rope_theta) && s.rope_theta < 1e15;
  std::string out = fmt::format(
      "theta {}, {}", whole ? fmt::format("{:.0f}", s.rope_theta) : fmt::format("{}", s.rope_theta),
      s.rope_layout == RopeLayout::kInterleaved ? "interleaved pairs" : "half-split");
  if (s.partial_rotary_factor != 1.0) out += fmt::format(", partial {:g}", s.partial_rotary_factor);
  if (s.sliding_rope) {
    const LayerRope& sr = *s.sliding_rope;
    out += fmt::format(" (sliding layers: theta {:g}, partial {:g}, {})", sr.theta, sr.partial_rotary_factor,
                       rope_type_name(sr.scaling.type));
  }
  if (r.type == RopeType::kProportional) {
    out +=
        fmt::format(", proportional: the first {:g} of the head's frequencies rotate", r.proportional_share);
    return r.factor == 1.0 ? out : out + fmt::format(" (x{:g})", r.factor);
  }
  switch (r.type) {
    case RopeType::kNone:
    case RopeType::kDefault:
      return out + ", no scaling";
    case RopeType::kLinear:
    case RopeType::kDynamic:
      return out + fmt::format(", {} x{:g}", rope_type_name(r.type), r.factor);
    case RopeType::kLlama3:
      return out + fmt::format(", llama3 x{:g} (low {:g}, high {:g}, original {})", r.factor,
                               r.low_freq_factor, r.high_freq_factor, r.original_max_position);
    case RopeType::kProportional:
      return out;
    case RopeType::kYarn:
      return out + fmt::format(", yarn x{:g} (original {}, beta {:g}/{:g}, mscale {:g}/{:g}{})", r.factor,
                               r.original_max_position, r.beta_fast, r.beta_slow, r.mscale, r.mscale_all_dim,
                               r.truncate ? "" : ", no truncation");
  }
  return out;
}

std::string describe_moe(const ModelSpec& s) {
  if (!s.moe) return "none (dense)";
  const MoeSpec& m = *s.moe;
  std::string out = fmt::format("{} routed experts x {} wide, top-{}", m.n_experts, m.expert_intermediate,
                                m.experts_per_token);
  if (m.n_zero_experts > 0) {
    out += fmt::format(" over {} + {} zero-computation experts (identity)", m.n_experts, m.n_zero_experts);
  }
  if (s.shortcut_moe) out += ", one shortcut MoE per layer pair beside dense MLPs";
  if (s.dense_mlp_beside_moe) out += ", beside each layer's dense MLP";
  if (m.shared_intermediate > 0) {
    out += fmt::format(", shared expert {} wide{}", m.shared_intermediate,
                       m.shared_expert_gate ? " (sigmoid-gated)" : "");
  }
  out += fmt::format(", {} {}", scoring_name(m.scoring), topk_method_name(m.topk_method));
  if (m.n_group > 1) out += fmt::format(" (groups {}/{})", m.topk_group, m.n_group);
  if (m.router_input_norm) out += ", router input normed and scaled";
  if (m.norm_topk_prob) out += ", renormalized";
  if (m.per_expert_scale) out += ", per-expert scales";
  if (m.routed_scaling_factor != 1.0) out += fmt::format(", x{:g}", m.routed_scaling_factor);
  if (m.swiglu_limit > 0) out += fmt::format(", clamped SwiGLU (limit {:g})", m.swiglu_limit);
  if (s.gelu_tanh_mlp) out += ", GEGLU experts";
  return out;
}

std::string describe_weights(const ModelSpec& s) {
  if (s.weights.packed.bits != 0) {
    return fmt::format(
        "{} projections (compressed-tensors pack-quantized: int32 words, {} scales{}), the rest {}",
        packed_int_label(s.weights.packed), dtype_name(s.activation_dtype),
        s.weights.packed.symmetric ? "" : ", int32-packed zero points", dtype_name(s.activation_dtype));
  }
  if (s.weights.nvfp4.layout != Nvfp4Layout::kNone) {
    const bool modelopt = s.weights.nvfp4.layout == Nvfp4Layout::kModelOpt;
    return fmt::format(
        "NVFP4 projections ({}: E2M1 two a byte, F8_E4M3 scales per 16, F32 global scale{}), the rest {}",
        modelopt ? "ModelOpt" : "compressed-tensors nvfp4-pack-quantized",
        s.weights.nvfp4.activation_scales ? "; activation scales read, not applied" : "",
        dtype_name(s.activation_dtype));
  }
  switch (s.weights.format) {
    case WeightFormat::kFp8Block:
      return fmt::format(
          "FP8 e4m3 projections with {}x{} {} block scales (weight_scale_inv){}{}", s.weights.block_rows,
          s.weights.block_cols, dtype_name(s.weights.fp8_scale_dtype()),
          s.weights.ue8m0_scales ? ", ue8m0" : "",
          s.weights.fp4_expert_group == 0
              ? std::string()
              : fmt::format("; routed experts FP4 e2m1 (I8, two a byte) with E8M0 scales per {}",
                            s.weights.fp4_expert_group));
    case WeightFormat::kMxfp4:
      return "MXFP4 routed experts (U8 blocks + E8M0 scales), the rest BF16";
    default:
      return std::string(dtype_name(s.activation_dtype));
  }
}

nlohmann::json spec_to_json(const ModelSpec& s) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : s.layers) {
    layers.push_back({{"mask", attention_mask_name(l.mask)},
                      {"window", l.window},
                      {"rope", l.use_rope},
                      {"moe", l.moe},
                      {"dense_intermediate", l.dense_intermediate}});
  }
  nlohmann::json j = {
      {"family", s.family},
      {"architecture", s.architecture},
      {"model_type", s.model_type},
      {"attention", s.attention == AttentionKind::kMla ? "mla" : "gqa"},
      {"vocab_size", s.vocab_size},
      {"hidden_size", s.hidden_size},
      {"n_layers", s.n_layers},
      {"n_heads", s.n_heads},
      {"n_kv_heads", s.n_kv_heads},
      {"head_dim", s.head_dim},
      {"intermediate_size", s.intermediate_size},
      {"max_position_embeddings", s.max_position_embeddings},
      {"rms_norm_eps", s.rms_norm_eps},
      {"rope_theta", s.rope_theta},
      {"partial_rotary_factor", s.partial_rotary_factor},
      {"rope_layout", s.rope_layout == RopeLayout::kInterleaved ? "interleaved" : "half_split"},
      {"rope_scaling",
       {{"type", rope_type_name(s.rope.type)},
        {"factor", s.rope.factor},
        {"low_freq_factor", s.rope.low_freq_factor},
        {"high_freq_factor", s.rope.high_freq_factor},
        {"original_max_position", s.rope.original_max_position},
        {"beta_fast", s.rope.beta_fast},
        {"beta_slow", s.rope.beta_slow},
        {"mscale", s.rope.mscale},
        {"mscale_all_dim", s.rope.mscale_all_dim},
        {"truncate", s.rope.truncate}}},
      {"attention_scale", s.attention_scale},
      {"qkv_bias", s.qkv_bias},
      {"o_bias", s.o_bias},
      {"mlp_bias", s.mlp_bias},
      {"qk_norm", s.qk_norm},
      {"qk_norm_full_width", s.qk_norm_full_width},
      {"qk_norm_weightless_after_rope", s.qk_norm_weightless_after_rope},
      {"attention_sinks", s.attention_sinks},
      {"tie_word_embeddings", s.tie_word_embeddings},
      {"sliding_window", s.sliding_window},
      {"attention_chunk_size", s.attention_chunk_size},
      {"activation_dtype", dtype_name(s.activation_dtype)},
      {"weights",
       {{"format", weight_format_name(s.weights.format)},
        {"block_rows", s.weights.block_rows},
        {"block_cols", s.weights.block_cols},
        {"ue8m0_scales", s.weights.ue8m0_scales},
        {"fp4_expert_group", s.weights.fp4_expert_group}}},
      {"packed_int", s.weights.packed.bits == 0
                         ? nlohmann::json(nullptr)
                         : nlohmann::json{{"bits", s.weights.packed.bits},
                                          {"group_size", s.weights.packed.group_size},
                                          {"symmetric", s.weights.packed.symmetric},
                                          {"scheme", packed_int_label(s.weights.packed)},
                                          {"ignore", s.weights.packed.ignore}}},
      {"n_mtp_layers", s.n_mtp_layers},
      {"layers", layers}};
  if (s.rope.attention_factor) j["rope_scaling"]["attention_factor"] = *s.rope.attention_factor;
  if (s.mla) {
    j["mla"] = {{"q_lora_rank", s.mla->q_lora_rank},
                {"kv_lora_rank", s.mla->kv_lora_rank},
                {"qk_nope_head_dim", s.mla->qk_nope_head_dim},
                {"qk_rope_head_dim", s.mla->qk_rope_head_dim},
                {"v_head_dim", s.mla->v_head_dim}};
  }
  if (s.moe) {
    const MoeSpec& m = *s.moe;
    j["moe"] = {{"n_experts", m.n_experts},
                {"experts_per_token", m.experts_per_token},
                {"expert_intermediate", m.expert_intermediate},
                {"n_shared_experts", m.n_shared_experts},
                {"shared_intermediate", m.shared_intermediate},
                {"shared_expert_gate", m.shared_expert_gate},
                {"scoring", scoring_name(m.scoring)},
                {"topk_method", topk_method_name(m.topk_method)},
                {"n_group", m.n_group},
                {"topk_group", m.topk_group},
                {"norm_topk_prob", m.norm_topk_prob},
                {"routed_scaling_factor", m.routed_scaling_factor},
                {"correction_bias", m.correction_bias},
                {"router_bias", m.router_bias},
                {"expert_bias", m.expert_bias},
                {"swiglu_limit", m.swiglu_limit},
                {"swiglu_alpha", m.swiglu_alpha}};
  }
  return j;
}

nlohmann::json summary_to_json(const ModelSummary& s) {
  const ParamCounts& p = s.params;
  nlohmann::json memory = nlohmann::json::array();
  for (const auto& row : s.weight_memory) {
    memory.push_back({{"format", row.format}, {"bits_per_param", row.bits_per_param}, {"bytes", row.bytes}});
  }
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& op : s.ops.ops) {
    ops.push_back({{"name", op.name},
                   {"label", op.label},
                   {"attrs", op.attrs},
                   {"weights", weight_format_name(op.weights)},
                   {"shapes", op.shapes},
                   {"prefill", op.prefill},
                   {"decode", op.decode},
                   {"calls_per_token", op.calls_per_token},
                   {"flops_per_token", op.flops_per_token},
                   {"matmul_flops_per_token", op.matmul_flops_per_token},
                   {"bytes_per_token", op.bytes_per_token}});
  }
  nlohmann::json recipes = nlohmann::json::array();
  for (const auto& g : s.recipes) {
    nlohmann::json steps = nlohmann::json::array();
    for (const LayerStep& st : g.recipe.steps) {
      nlohmann::json step = {
          {"op", layer_op_name(st.op)}, {"in", layer_value_name(st.in)}, {"out", layer_value_name(st.out)}};
      if (st.op == LayerOp::kNorm || st.op == LayerOp::kOutputNorm) step["norm"] = layer_norm_name(st.norm);
      steps.push_back(step);
    }
    recipes.push_back({{"layers", g.layers},
                       {"text", describe_recipe(g.recipe)},
                       {"ends_reference_layer", g.recipe.ends_reference_layer},
                       {"steps", steps}});
  }
  nlohmann::json layer_kinds = nlohmann::json::array();
  for (const KvLayerKind& k : s.kv_cache.kinds) {
    layer_kinds.push_back({{"kind", k.name},
                           {"layers", k.layers},
                           {"window", k.window},
                           {"compress_ratio", k.compress_ratio},
                           {"raw_bytes_per_token", k.raw_bytes_per_token},
                           {"compressed_bytes_per_token", k.compressed_bytes_per_token}});
  }
  return {{"source", s.source},
          {"spec", spec_to_json(s.spec)},
          {"layer_recipes", recipes},
          {"params",
           {{"total", p.total},
            {"active", p.active},
            {"active_min", p.active_min},
            {"active_without_embedding", p.active_without_embedding},
            {"active_without_embeddings", p.active_without_embeddings},
            {"embedding", p.embedding},
            {"lm_head", p.lm_head},
            {"attention", p.attention},
            {"norms", p.norms},
            {"dense_mlp", p.dense_mlp},
            {"router", p.router},
            {"routed_experts", p.routed_experts},
            {"routed_experts_active", p.routed_experts_active},
            {"shared_experts", p.shared_experts},
            {"hyper_connections", p.hyper_connections},
            {"mtp", p.mtp},
            {"stored_bytes", p.stored_bytes},
            {"convention",
             "total counts every stored weight of the main model: the input embedding and the lm_head "
             "(when untied) both count, MTP layers and quantization scales do not; active counts both in "
             "full plus the top-k routed experts"}}},
          {"n_tensors", s.n_tensors},
          {"weight_memory", memory},
          {"kv_cache",
           {{"layout", s.kv_cache.layout},
            {"dtype", kv_dtype_name(s.kv_cache.dtype)},
            {"element_bits", s.kv_cache.element_bits},
            {"bytes_per_token", s.kv_cache.bytes_per_token},
            {"bytes_per_1k_token_sequence", s.kv_cache.bytes_per_1k_tokens},
            {"bounded_layers", s.kv_cache.bounded_layers},
            {"kv_layers", s.kv_cache.kv_layers},
            {"state_layers", s.kv_cache.state_layers},
            {"state_bytes_per_sequence", s.kv_cache.state_bytes_per_sequence},
            // A running sequence of the engine holds its live state and a snapshot at its last whole
            // block (prefix caching, rollback): two state blocks.
            {"state_bytes_per_running_sequence", 2 * s.kv_cache.state_bytes_per_sequence},
            {"bytes_per_token_past_windows", s.kv_cache.bytes_per_token_past_windows},
            {"layer_kinds", layer_kinds}}},
          {"ops",
           {{"context_tokens", s.ops.context_tokens},
            {"bf16_activations", s.ops.bf16_activations},
            {"flops_per_token", s.ops.total_flops_per_token()},
            {"bytes_per_token", s.ops.total_bytes_per_token()},
            {"list", ops}}}};
}

}  // namespace day0
