#include "day0/synth/miniature.h"
#include "day0/model/family_registry.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "day0/model/config_parser.h"
#include "day0/model/config_writer.h"

namespace day0 {

namespace {

int64_t or_default(int64_t value, int64_t fallback) {
  return value > 0 ? value : fallback;
}

// Layer pattern: a leading run of dense layers shrinks to one dense layer,
// then the pattern continues from the first MoE layer, so periodic patterns (sliding/full,
// NoPE every 4th, MoE every 2nd) survive in the first few layers.
std::vector<LayerSpec> shrink_layers(const std::vector<LayerSpec>& full, int64_t n) {
  size_t dense_prefix = 0;
  while (dense_prefix < full.size() && !full[dense_prefix].moe) ++dense_prefix;
  std::vector<LayerSpec> out;
  size_t start = 0;
  if (dense_prefix > 0 && dense_prefix < full.size()) {
    out.push_back(full[0]);
    start = dense_prefix;
  }
  const size_t period = full.size() - start;
  for (size_t i = 0; static_cast<int64_t>(out.size()) < n; ++i) out.push_back(full[start + i % period]);
  return out;
}

// Shared key = value attention with low-rank queries and its compressed KV layers (DeepSeek-V4): heads of
// 32 (the release's rotary share of them), the q latent and output groups small, two output groups so that
// a TP 2 split keeps one a rank, the heavily compressed layers' ratio cut to 8 (128 would need prompts of
// hundreds of tokens before a window completes), and an 8-head indexer keeping 2 entries: short prompts
// then exercise the sparse selection, and 8 heads make a rectified score of exactly 0 (a tie) rare.
void shrink_shared_kv_attention(const ModelSpec& full, const MiniatureOptions& o, ModelSpec& m) {
  m.head_dim = or_default(o.head_dim, 32);
  const SharedKvLowRankAttentionSpec& fa = *full.shared_kv_low_rank;
  int64_t groups = std::max<int64_t>(1, std::min(fa.out_groups, m.n_heads / 2));
  while (m.n_heads % groups != 0) --groups;
  // FP8 block weights: each group's rows of o_a fill whole scale blocks (the grouped matmul reads a group's
  // rows by whole blocks), as the release's 1024 do its 128.
  const int64_t out_rank = m.weights.format == WeightFormat::kFp8Block ? m.weights.block_rows : 16;
  m.shared_kv_low_rank =
      SharedKvLowRankAttentionSpec{.q_lora_rank = 32, .out_groups = groups, .out_rank = out_rank};
  if (full.compressed_kv) {
    CompressedKvSpec ckv = *full.compressed_kv;
    ckv.index_n_heads = 8;
    ckv.index_head_dim = 16;
    ckv.index_topk = 2;
    m.compressed_kv = ckv;
  }
  constexpr int64_t kHeavyRatio = 8;
  for (LayerSpec& layer : m.layers) {
    if (layer.kv_compress_ratio > 0 && !layer.compressed_sparse)
      layer.kv_compress_ratio = std::min(layer.kv_compress_ratio, kHeavyRatio);
  }
}

}  // namespace

Result<ModelSpec> make_miniature_spec(const ModelSpec& full, const MiniatureOptions& o) {
  for (int64_t v : {o.layers, o.hidden, o.heads, o.head_dim, o.intermediate, o.experts, o.experts_per_token,
                    o.expert_intermediate, o.vocab, o.window}) {
    if (v < 0 || v > (int64_t{1} << 24))
      return invalid_argument(fmt::format("miniature size {} is out of range", v));
  }
  ModelSpec m = full;
  // An alias model_type (one transformers builds only with the release's remote code) becomes the
  // family's own, whose class the architecture names, so that the miniature loads as is. An image-text
  // wrapper keeps its model_type: it names the wrapper's config, not the text model's.
  if (!m.multimodal_wrapper) m.model_type = family_info(m.family).name();
  const int64_t hidden = or_default(o.hidden, 64);
  const int64_t dense_width = or_default(o.intermediate, 128);
  const int64_t expert_width = or_default(o.expert_intermediate, 64);
  const int64_t window = or_default(o.window, 16);
  m.hidden_size = hidden;
  m.vocab_size = or_default(o.vocab, 256);

  // Layers.
  const bool has_dense_prefix =
      full.moe && !full.layers.empty() && !full.layers[0].moe &&
      std::any_of(full.layers.begin(), full.layers.end(), [](auto& l) { return l.moe; });
  const int64_t n_layers = or_default(o.layers, 4);
  if (has_dense_prefix && n_layers < 2) {
    return invalid_argument("--layers must be at least 2 to keep one dense layer before the MoE layers");
  }
  if (full.shortcut_moe && n_layers % 2 != 0) {
    return invalid_argument(
        "--layers must be even: shortcut-MoE layers come in pairs of attention sublayers");
  }
  m.layers = shrink_layers(full.layers, n_layers);
  m.n_layers = n_layers;
  // KV shared across layers: the miniature ends with the release's last layers, up to half of it reading
  // the KV of the layers before (fewer, or none, when those lack a layer of a reader's kind). Without
  // that, a release whose last layer is full attention among sliding ones (a config can force it) keeps it
  // so.
  const std::vector<LayerSpec> prefix = m.layers;
  const auto full_shared =
      std::count_if(full.layers.begin(), full.layers.end(), [](auto& l) { return l.kv_source >= 0; });
  int64_t shared = std::min<int64_t>(full_shared, n_layers / 2);
  for (; shared > 0; --shared) {
    m.layers = prefix;
    for (int64_t i = 0; i < shared; ++i) {
      m.layers[static_cast<size_t>(n_layers - shared + i)] = full.layers[full.layers.size() - shared + i];
    }
    if (assign_shared_kv_layers(m, shared)) break;
  }
  if (shared == 0) {
    m.layers = prefix;
    const bool any_sliding = std::any_of(full.layers.begin(), full.layers.end(),
                                         [](auto& l) { return l.mask == AttentionMask::kSliding; });
    if (any_sliding && full.layers.back().mask == AttentionMask::kCausal &&
        m.layers.back().mask == AttentionMask::kSliding) {
      m.layers.back() = full.layers.back();
    }
    assign_shared_kv_layers(m, 0);
  }
  if (full.sliding_window > 0) m.sliding_window = std::min(full.sliding_window, window);
  if (full.attention_chunk_size > 0) m.attention_chunk_size = std::min(full.attention_chunk_size, window);

  // Attention.
  m.n_heads = or_default(o.heads, 4);
  if (full.n_kv_heads == full.n_heads) {
    m.n_kv_heads = m.n_heads;
  } else if (full.n_kv_heads == 1) {
    m.n_kv_heads = 1;
  } else {
    m.n_kv_heads = m.n_heads % 2 == 0 ? 2 : 1;  // stay grouped
  }
  if (full.mla) {
    MlaSpec mla;
    mla.q_lora_rank = full.mla->q_lora_rank > 0 ? 48 : 0;
    mla.kv_lora_rank = 32;
    mla.qk_nope_head_dim = 16;
    mla.qk_rope_head_dim = 8;
    mla.v_head_dim = 16;
    if (full.mla->latent_scale != 1.0) {  // LoRA rescaling, from the new sizes
      mla.q_scale = std::sqrt(static_cast<double>(hidden) / static_cast<double>(mla.q_lora_rank));
      mla.latent_scale = std::sqrt(static_cast<double>(hidden) / static_cast<double>(mla.kv_lora_rank));
    }
    m.mla = mla;
    m.head_dim = mla.qk_rope_head_dim;
    // The lightning indexer: 8 heads of 16 (rope on the first 8), and a top-k short enough for the
    // miniature's prompts to exercise the sparse selection. With 4 heads, a key whose every head's dot
    // product is negative scores exactly 0 often enough to tie at the top-k boundary, where transformers'
    // pick is unspecified.
    if (full.indexer) {
      m.indexer =
          IndexerSpec{.n_heads = 8, .head_dim = 16, .topk = 4, .rope_layout = full.indexer->rope_layout};
    }
    m.n_kv_heads = m.n_heads;
  } else if (full.shared_kv_low_rank) {
    shrink_shared_kv_attention(full, o, m);
  } else {
    m.head_dim = or_default(o.head_dim, 16);
    // Partial RoPE rotates int(head_dim * factor) dimensions, which transformers rounds up to even and Day0
    // down: a default head width grows until every factor gives an even count (0.334 of 24 is 8).
    auto odd_rotary = [&](int64_t d) {
      const auto odd = [d](double f) { return static_cast<int64_t>(static_cast<double>(d) * f) % 2 != 0; };
      return odd(full.partial_rotary_factor) ||
             (full.sliding_rope && odd(full.sliding_rope->partial_rotary_factor));
    };
    while (o.head_dim == 0 && odd_rotary(m.head_dim) && m.head_dim < 256) m.head_dim += 8;
    // Value heads of another width than the keys keep the release's ratio (128 / 192 of 24 is 16).
    if (full.value_head_dim > 0 && full.value_head_dim != full.head_dim) {
      m.value_head_dim = std::max<int64_t>(2, m.head_dim * full.value_head_dim / full.head_dim / 2 * 2);
    }
  }
  // Layers with head counts or widths of their own keep being more or fewer than the model's.
  for (LayerSpec& layer : m.layers) {
    layer.head_dim = layer.head_dim == 0 || layer.head_dim == full.head_dim ? 0
                     : layer.head_dim > full.head_dim                       ? 2 * m.head_dim
                                                      : std::max<int64_t>(8, m.head_dim / 2);
    const bool more_kv = layer.n_kv_heads > full.n_kv_heads, fewer_kv = layer.n_kv_heads > 0 && !more_kv;
    layer.n_kv_heads = layer.n_kv_heads == 0 || layer.n_kv_heads == full.n_kv_heads ? 0
                       : more_kv ? std::min(m.n_heads, 2 * m.n_kv_heads)
                                 : std::max<int64_t>(1, m.n_kv_heads / 2);
    if (fewer_kv && layer.n_kv_heads == m.n_kv_heads) layer.n_kv_heads = 0;
    const int64_t kv = layer_kv_heads(m, layer);
    if (layer.n_heads > 0 && layer.n_heads != full.n_heads) {
      layer.n_heads = layer.n_heads > full.n_heads ? 2 * m.n_heads : std::max(kv, m.n_heads / 2 / kv * kv);
    } else {
      layer.n_heads = 0;
    }
  }
  // Block-sparse attention: index heads as the release relates them to the heads (one per KV head), keys
  // at least as wide as the rotated part, and blocks of 4 with a top-3 short enough for the miniature's
  // prompts to exercise the selection.
  if (full.block_indexer) {
    const BlockIndexerSpec& fi = *full.block_indexer;
    const int64_t heads = fi.n_heads == full.n_kv_heads ? m.n_kv_heads
                          : fi.n_heads == full.n_heads  ? m.n_heads
                                                        : (m.n_heads % 2 == 0 ? 2 : 1);
    m.block_indexer = BlockIndexerSpec{.n_heads = heads,
                                       .head_dim = std::max<int64_t>(16, m.head_dim),
                                       .block_size = 4,
                                       .topk_blocks = 3,
                                       .local_blocks = std::min<int64_t>(fi.local_blocks, 3)};
  }
  // Gated DeltaNet: 2 key heads of 16, value heads in the release's ratio, its conv width.
  if (full.linear_attention) {
    const LinearAttentionSpec& fl = *full.linear_attention;
    const int64_t ratio = fl.n_value_heads / fl.n_key_heads;
    m.linear_attention = LinearAttentionSpec{.n_key_heads = 2,
                                             .n_value_heads = 2 * ratio,
                                             .key_head_dim = 16,
                                             .value_head_dim = 16,
                                             .conv_kernel = fl.conv_kernel,
                                             .beta_scale = fl.beta_scale,
                                             .norm_eps = fl.norm_eps};
  }

  // Mamba-2: 4 heads of 8 in the release's groups (at most 2), a state of 16, its conv width, chunks of 4.
  if (full.mamba) {
    MambaSpec mm = *full.mamba;
    mm.n_heads = 4;
    mm.head_dim = 8;
    mm.n_groups = full.mamba->n_groups > 1 ? 2 : 1;
    mm.state_size = 16;
    mm.chunk_size = 4;
    m.mamba = mm;
  }
  if (full.moe && full.moe->latent_size > 0) m.moe->latent_size = std::max<int64_t>(8, hidden / 2);

  // FFN widths: the config's intermediate_size is the expert width in families that share the key.
  const bool shared_key = full.moe && full.intermediate_size == full.moe->expert_intermediate;
  m.intermediate_size = shared_key ? expert_width : dense_width;
  for (size_t n = 0; n < m.layers.size(); ++n) {
    LayerSpec& layer = m.layers[n];
    if (layer.mask == AttentionMask::kSliding) layer.window = m.sliding_window;
    if (layer.mask == AttentionMask::kChunked) layer.window = m.attention_chunk_size;
    // A shortcut-MoE layer, or one with a dense MLP beside its MoE, keeps that MLP.
    if ((layer.moe && !full.shortcut_moe && !full.dense_mlp_beside_moe) || layer.dense_intermediate == 0) {
      layer.dense_intermediate = 0;
    } else {
      layer.dense_intermediate =
          layer.dense_intermediate == full.intermediate_size ? m.intermediate_size : dense_width;
    }
  }

  // Layers reading another layer's KV with a double-wide MLP (use_double_wide_mlp) keep it.
  const bool double_wide = std::any_of(full.layers.begin(), full.layers.end(), [&](auto& l) {
    return l.kv_source >= 0 && !l.moe && l.dense_intermediate == 2 * full.intermediate_size;
  });
  for (LayerSpec& layer : m.layers) {
    if (double_wide && !layer.moe)
      layer.dense_intermediate = (layer.kv_source >= 0 ? 2 : 1) * m.intermediate_size;
  }
  // Per-layer inputs: 8 wide, over the miniature's vocabulary.
  if (full.per_layer_input) m.per_layer_input = PerLayerInputSpec{.vocab_size = m.vocab_size, .width = 8};

  if (full.moe) {
    const MoeSpec& fm = *full.moe;
    MoeSpec& mm = *m.moe;
    const bool grouped = fm.n_group > 1;
    mm.n_experts = std::min(or_default(o.experts, grouped ? 16 : 8), std::max<int64_t>(fm.n_experts, 2));
    mm.experts_per_token = o.experts_per_token > 0
                               ? std::min(o.experts_per_token, mm.n_experts)
                               : std::min(std::max<int64_t>(1, mm.n_experts / 4), fm.experts_per_token);
    if (grouped) {
      // Group-limited top-k scores groups by their top-2 experts: keep >= 2 experts a group.
      int64_t groups = std::min<int64_t>(fm.n_group, 4);
      while (groups > 1 && (mm.n_experts % groups != 0 || mm.n_experts / groups < 2)) --groups;
      mm.n_group = groups;
      mm.topk_group = std::clamp<int64_t>(std::min(fm.topk_group, groups / 2), 1, groups);
      const int64_t reachable = mm.topk_group * (mm.n_experts / groups);
      mm.experts_per_token = std::min(mm.experts_per_token, reachable);
    }
    mm.expert_intermediate = expert_width;
    // Zero-computation experts keep the release's proportion (e.g. half as many as real).
    if (fm.n_zero_experts > 0) {
      mm.n_zero_experts = std::max<int64_t>(1, mm.n_experts * fm.n_zero_experts / fm.n_experts);
    }
    if (fm.shared_intermediate > 0) {
      const bool multiple =
          fm.expert_intermediate > 0 && fm.shared_intermediate % fm.expert_intermediate == 0;
      mm.shared_intermediate =
          multiple ? expert_width * (fm.shared_intermediate / fm.expert_intermediate) : expert_width;
    }
  }
  // Bench shapes (--release-attention): the release's MLA ranks and head widths and its indexer (heads,
  // width, top-k) under the miniature's head count, so that attention reads and computes per head what
  // it does in the release.
  if (o.release_attention && full.mla) {
    MlaSpec mla = *full.mla;
    if (full.mla->latent_scale != 1.0) {
      mla.q_scale = std::sqrt(static_cast<double>(hidden) / static_cast<double>(mla.q_lora_rank));
      mla.latent_scale = std::sqrt(static_cast<double>(hidden) / static_cast<double>(mla.kv_lora_rank));
    }
    m.mla = mla;
    m.head_dim = mla.qk_rope_head_dim;
    m.indexer = full.indexer;
  }
  if ((m.weights.format == WeightFormat::kMxfp4 || m.weights.fp4_expert_group != 0) &&
      (m.hidden_size % 32 != 0 || (m.moe && m.moe->expert_intermediate % 32 != 0))) {
    return invalid_argument("FP4 experts need --hidden and --expert-intermediate to be multiples of 32");
  }
  m.attention_scale = derive_attention_scale(m);
  D0_RETURN_IF_ERROR(validate_model_spec(m).with_context("miniature"));

  // Canonical form: what config.json written from it parses back to.
  const auto config = to_hf_config(m);
  D0_ASSIGN_OR_RETURN(ModelSpec canonical, parse_model_config(config, "miniature config.json"));
  if (!(canonical == m)) {
    return internal_error("miniature of " + full.model_type +
                          " does not survive its own config.json round trip");
  }
  return canonical;
}

}  // namespace day0
