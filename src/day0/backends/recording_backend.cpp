#include "day0/backends/recording_backend.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "day0/ops/op_names.h"
#include "day0/ops/op_schema.h"

namespace day0 {

std::string weight_label(std::string_view name) {
  std::string s(name);
  // Everything up to the decoder layer index ("model.layers.3.", "language_model.model.layers.0.").
  if (const size_t at = s.find("layers."); at != std::string::npos) {
    size_t end = at + 7;
    while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
    if (end < s.size() && s[end] == '.') s = s.substr(end + 1);
  } else {
    for (std::string_view prefix : {"language_model.model.", "language_model.", "model."}) {
      if (s.starts_with(prefix)) {
        s = s.substr(prefix.size());
        break;
      }
    }
  }
  if (s.ends_with(".weight")) s.resize(s.size() - 7);
  // Expert indices: ".17." -> ".*."
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    const bool whole = j > i && i > 0 && s[i - 1] == '.' && (j == s.size() || s[j] == '.');
    if (whole) {
      out += '*';
      i = j;
    } else {
      out += s[i++];
    }
  }
  return out;
}

namespace {

double d(int64_t v) {
  return static_cast<double>(v);
}

std::string format_g(double v) {
  return fmt::format("{:g}", v);
}

// What reading a weight costs: its bytes, scales included.
double weight_bytes(const WeightView& w) {
  return static_cast<double>(w.data_bytes() + w.scale_bytes());
}

void set_weights(OpSpec& op, const WeightView& w) {
  op.weights = w.format;
  op.label = weight_label(w.name);
  op.attrs["weights"] = weight_format_name(w.format);
  if (w.nvfp4()) op.attrs["weights"] = "NVFP4";  // the FP4 kernels, E4M3 group scales and a global scale
  if (w.format == WeightFormat::kFp8Block)
    op.attrs["block"] = fmt::format("{}x{}", w.block_rows, w.block_cols);
  if (w.is_int()) {
    op.attrs["group"] = fmt::format("{}", w.group >= w.cols ? w.cols : w.group);
    if (w.zeros != nullptr) op.attrs["zero_points"] = "true";
  }
}

OpSpec elementwise(std::string_view name, int64_t rows, int64_t cols, double flops_per_element) {
  OpSpec op;
  op.name = std::string(name);
  op.shapes = {{rows, cols}};
  op.flops_per_token = flops_per_element * d(rows) * d(cols);
  return op;
}

const char* layout_name(GateUpLayout l) {
  switch (l) {
    case GateUpLayout::kSeparate:
      return "separate";
    case GateUpLayout::kInterleaved:
      return "interleaved";
    case GateUpLayout::kConcatenated:
      return "concatenated";
  }
  return "?";
}

}  // namespace

RecordingBackend::RecordingBackend(Backend* inner, int64_t attention_context)
    : inner_(inner), attention_context_(attention_context) {}

bool RecordingBackend::supports(const OpKey& key) const {
  return inner_ ? inner_->supports(key) : find_op_schema(key.op) != nullptr;
}

void RecordingBackend::note(OpSpec op) {
  op.calls_per_token = 1;
  op.prefill = phase_ == StepPhase::kPrefill;
  op.decode = phase_ == StepPhase::kDecode;
  calls_.push_back({phase_, std::move(op)});
}

RowKeys RecordingBackend::keys_for(int64_t held, const KeyReach& reach) const {
  if (attention_context_ >= 0) return row_keys(reach, attention_context_ + 1);
  // The keys the call holds: every one scored, at most a selection of raw keys attended.
  RowKeys keys{.attended = d(held), .indexed = d(held)};
  if (reach.selected > 0 && reach.entry_ratio == 0)
    keys.attended = std::min(keys.attended, d(reach.selected));
  return keys;
}

namespace {

// The keys a plain attention call reaches: its window (a chunk counts as one) and block selection.
KeyReach call_reach(AttentionMask mask, int64_t window, const BlockSelection& selection) {
  KeyReach reach;
  if (mask != AttentionMask::kCausal && window > 0) reach.window = window;
  if (!selection.empty()) reach.selected = selection.k() * selection.block_size;
  return reach;
}

}  // namespace

namespace {

// Compressed attention pools one entry per `ratio` tokens: the recorded decode step (one token after a
// prompt of whole windows) pools none, yet every decoded token feeds one row to a later pooling. Its
// share per decoded token is the kernel's cost over one row (the cost is linear in the rows it pools):
// a row marked amortized=true, with no call per token, the prefill call's cost over its rows.
void add_amortized_pooling(OpList& list, const OpSpec& prefill) {
  OpSpec share = prefill;
  share.attrs["amortized"] = "true";
  auto it = std::find_if(list.ops.begin(), list.ops.end(), [&](const OpSpec& e) {
    return e.name == share.name && e.label == share.label && e.weights == share.weights &&
           e.attrs == share.attrs;
  });
  if (it == list.ops.end()) {
    share.shapes = {{std::stoll(prefill.attrs.at("ratio")), prefill.shapes.at(0).at(1)}};  // one window
    share.prefill = share.decode = true;
    share.calls_per_token = 0;
    share.flops_per_token = share.matmul_flops_per_token = share.bytes_per_token = 0;
    list.ops.push_back(std::move(share));
    it = std::prev(list.ops.end());
  }
  const double rows = d(std::max<int64_t>(prefill.shapes.at(0).at(0), 1));
  it->flops_per_token += prefill.flops_per_token / rows;
  it->matmul_flops_per_token += prefill.matmul_flops_per_token / rows;
  it->bytes_per_token += prefill.bytes_per_token / rows;
}

}  // namespace

OpList RecordingBackend::op_list() const {
  OpList list;
  list.context_tokens = std::max<int64_t>(attention_context_, 0);
  auto same_kind = [](const OpSpec& a, const OpSpec& b) {
    return a.name == b.name && a.label == b.label && a.weights == b.weights && a.attrs == b.attrs;
  };
  for (const RecordedCall& c : calls_) {
    if (c.phase != StepPhase::kDecode) continue;
    auto it = std::find_if(list.ops.begin(), list.ops.end(),
                           [&](const OpSpec& e) { return same_kind(e, c.op) && e.shapes == c.op.shapes; });
    if (it == list.ops.end()) {
      list.ops.push_back(c.op);
      continue;
    }
    it->calls_per_token += 1;
    it->flops_per_token += c.op.flops_per_token;
    it->matmul_flops_per_token += c.op.matmul_flops_per_token;
    it->bytes_per_token += c.op.bytes_per_token;
  }
  for (const RecordedCall& c : calls_) {
    if (c.phase != StepPhase::kPrefill) continue;
    bool marked = false;
    for (OpSpec& e : list.ops) {
      if (same_kind(e, c.op)) {
        e.prefill = true;
        marked = true;
      }
    }
    if (marked) continue;
    if (c.op.name == op::kKvCompress) {
      add_amortized_pooling(list, c.op);
      continue;
    }
    OpSpec op = c.op;  // a prefill-only op: no calls, no cost per decoded token
    op.calls_per_token = 0;
    op.flops_per_token = op.matmul_flops_per_token = op.bytes_per_token = 0;
    list.ops.push_back(std::move(op));
  }
  return list;
}

// ---- one description per kernel ------------------------------------------------------------------

void RecordingBackend::embedding(const EmbeddingArgs& a) {
  OpSpec op;
  op.name = std::string(op::kEmbedding);
  set_weights(op, a.table);
  op.shapes = {{a.table.rows, a.table.cols}};
  op.bytes_per_token =
      d(static_cast<int64_t>(a.ids.size())) * weight_bytes(a.table) / d(std::max<int64_t>(a.table.rows, 1));
  note(std::move(op));
  if (inner_) inner_->embedding(a);
}

void RecordingBackend::matmul(const MatmulArgs& a) {
  OpSpec op;
  op.name = std::string(op::kMatmul);
  set_weights(op, a.w);
  if (a.bias != nullptr) op.attrs["bias"] = "true";
  if (!a.exact) op.attrs["exact"] = "false";
  if (!a.exact && a.w.is_int()) op.attrs["activations"] = "int8/32";  // ops/int8_activations.h
  op.shapes = {{a.w.rows, a.w.cols}};
  op.matmul_flops_per_token = 2.0 * d(a.x.rows) * d(a.w.rows) * d(a.w.cols);
  op.flops_per_token = op.matmul_flops_per_token;
  op.bytes_per_token = weight_bytes(a.w) + (a.bias != nullptr ? 4.0 * d(a.w.rows) : 0.0);
  note(std::move(op));
  if (inner_) inner_->matmul(a);
}

void RecordingBackend::grouped_matmul(const GroupedMatmulArgs& a) {
  OpSpec op;
  op.name = std::string(op::kGroupedMatmul);
  set_weights(op, a.w);
  op.attrs["groups"] = std::to_string(a.groups);
  if (!a.exact) op.attrs["exact"] = "false";
  op.shapes = {{a.w.rows, a.w.cols}};
  // Every weight element meets one group's columns of each row: the FLOPs of one [N, K/G] matmul.
  op.matmul_flops_per_token = 2.0 * d(a.x.rows) * d(a.w.rows) * d(a.w.cols);
  op.flops_per_token = op.matmul_flops_per_token;
  op.bytes_per_token = weight_bytes(a.w);
  note(std::move(op));
  if (inner_) inner_->grouped_matmul(a);
}

void RecordingBackend::rms_norm(const RmsNormArgs& a) {
  OpSpec op = elementwise(op::kRmsNorm, a.x.rows, a.x.cols, 4.0);
  op.attrs["eps"] = format_g(a.eps);
  if (a.weight.empty()) op.attrs["weight"] = "none";
  op.bytes_per_token = 4.0 * d(static_cast<int64_t>(a.weight.size()));
  note(std::move(op));
  if (inner_) inner_->rms_norm(a);
}

void RecordingBackend::layer_norm(const LayerNormArgs& a) {
  OpSpec op = elementwise(op::kLayerNorm, a.x.rows, a.x.cols, 6.0);
  op.attrs["eps"] = format_g(a.eps);
  if (a.weight.empty()) op.attrs["weight"] = "none";
  op.bytes_per_token = 4.0 * d(static_cast<int64_t>(a.weight.size() + a.bias.size()));
  note(std::move(op));
  if (inner_) inner_->layer_norm(a);
}

void RecordingBackend::rope(const RopeArgs& a) {
  OpSpec op;
  op.name = std::string(op::kRope);
  op.attrs = {{"layout", a.layout == RopeLayout::kInterleaved ? "interleaved" : "half_split"},
              {"rotary_dim", std::to_string(a.rotary_dim)}};
  if (a.attention_factor != 1.0f) op.attrs["attention_factor"] = format_g(a.attention_factor);
  if (a.rotary_col0 > 0) op.attrs["rotary_col0"] = std::to_string(a.rotary_col0);
  op.shapes = {{a.x.rows, a.n_heads, a.head_dim}};
  op.flops_per_token = 3.0 * d(a.x.rows) * d(a.n_heads) * d(a.rotary_dim);
  note(std::move(op));
  if (inner_) inner_->rope(a);
}

namespace {

std::map<std::string, std::string> attention_attrs(AttentionMask mask, int64_t window, int64_t n_heads,
                                                   int64_t n_kv_heads, float scale, bool sinks) {
  std::map<std::string, std::string> attrs = {
      {"mask", attention_mask_name(mask)},
      {"groups", std::to_string(n_heads / std::max<int64_t>(n_kv_heads, 1))},
      {"scale", fmt::format("{:.6g}", scale)}};
  if (mask != AttentionMask::kCausal) attrs["window"] = std::to_string(window);
  if (sinks) attrs["sinks"] = "true";
  return attrs;
}

}  // namespace

void RecordingBackend::attention(const AttentionArgs& a) {
  const int64_t dv = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
  OpSpec op;
  op.name = std::string(op::kAttention);
  op.attrs = attention_attrs(a.mask, a.window, a.n_heads, a.n_kv_heads, a.scale, !a.sinks.empty());
  op.shapes = {{a.q.rows, a.n_heads, a.head_dim}, {a.n_kv_heads, a.head_dim}, {a.n_kv_heads, dv}};
  // A caller that gathered each row's keys (compressed KV attention) says what they reach.
  const double keys =
      keys_for(a.k.rows, a.reach ? *a.reach : call_reach(a.mask, a.window, a.selection)).attended;
  op.flops_per_token = 2.0 * d(a.q.rows) * d(a.n_heads) * keys * d(a.head_dim + dv);
  op.bytes_per_token = 4.0 * keys * d(a.n_kv_heads * (a.head_dim + dv));
  note(std::move(op));
  if (inner_) inner_->attention(a);
}

void RecordingBackend::paged_attention(const PagedAttentionArgs& a) {
  const int64_t dv = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
  OpSpec op;
  op.name = std::string(op::kPagedAttention);
  op.attrs = attention_attrs(a.mask, a.window, a.n_heads, a.n_kv_heads, a.scale, !a.sinks.empty());
  if (!a.seqs.empty()) op.attrs["kv_dtype"] = kv_dtype_name(a.seqs[0].kv.dtype);
  op.shapes = {{a.q.rows, a.n_heads, a.head_dim}, {a.n_kv_heads, a.head_dim}, {a.n_kv_heads, dv}};
  // Block-sparse attention: each query head reads at most its selected blocks' keys.
  const bool sparse = !a.selection.empty();
  if (sparse) {
    op.attrs["block_size"] = std::to_string(a.selection.block_size);
    op.attrs["topk_blocks"] = std::to_string(a.selection.k());
  }
  const KeyReach reach = a.reach ? *a.reach : call_reach(a.mask, a.window, a.selection);
  for (const PagedSequence& s : a.seqs) {
    const double keys = keys_for(s.kv.length, reach).attended;
    op.flops_per_token += 2.0 * d(s.q_rows) * d(a.n_heads) * keys * d(a.head_dim + dv);
    op.bytes_per_token += keys * d((s.kv.first_width + s.kv.second_width) * kv_dtype_bytes(s.kv.dtype));
  }
  note(std::move(op));
  if (inner_) inner_->paged_attention(a);
}

namespace {

// MLA cost of `rows` queries over `keys` cached latents: absorbed, W_UK into the query and W_UV after
// the latent attention per query; naive, every cached latent expanded once, then plain attention.
void mla_cost(OpSpec& op, MlaForm form, int64_t rows, double keys, int64_t n_heads, int64_t d_nope,
              int64_t d_rope, int64_t d_v, int64_t rank) {
  if (form == MlaForm::kAbsorbed) {
    const double absorb = 2.0 * d(rows) * d(n_heads) * d((d_nope + d_v) * rank);
    op.matmul_flops_per_token += absorb;
    op.flops_per_token += absorb + 2.0 * d(rows) * d(n_heads) * keys * d(2 * rank + d_rope);
  } else {
    const double expand = 2.0 * keys * d(n_heads) * d((d_nope + d_v) * rank);
    op.matmul_flops_per_token += expand;
    op.flops_per_token += expand + 2.0 * d(rows) * d(n_heads) * keys * d(d_nope + d_rope + d_v);
  }
}

std::map<std::string, std::string> mla_attrs(MlaForm form, int64_t rank, int64_t d_rope, float scale) {
  return {{"form", form == MlaForm::kAbsorbed ? "absorbed" : "naive"},
          {"kv_lora_rank", std::to_string(rank)},
          {"rope_dim", std::to_string(d_rope)},
          {"scale", fmt::format("{:.6g}", scale)}};
}

}  // namespace

void RecordingBackend::mla_attention(const MlaArgs& a) {
  OpSpec op;
  op.name = std::string(op::kMlaAttention);
  op.attrs = mla_attrs(a.form, a.kv_lora_rank, a.d_rope, a.scale);
  set_weights(op, a.w_kv_b);
  op.shapes = {{a.q.rows, a.n_heads, a.d_nope + a.d_rope}, {a.kv_lora_rank}, {a.d_rope}};
  const double keys = keys_for(a.c_kv.rows, KeyReach{}).attended;
  mla_cost(op, a.form, a.q.rows, keys, a.n_heads, a.d_nope, a.d_rope, a.d_v, a.kv_lora_rank);
  op.bytes_per_token = weight_bytes(a.w_kv_b) + 4.0 * keys * d(a.kv_lora_rank + a.d_rope);
  note(std::move(op));
  if (inner_) inner_->mla_attention(a);
}

void RecordingBackend::paged_mla_attention(const PagedMlaArgs& a) {
  OpSpec op;
  op.name = std::string(op::kPagedMlaAttention);
  op.attrs = mla_attrs(a.form, a.kv_lora_rank, a.d_rope, a.scale);
  set_weights(op, a.w_kv_b);
  if (!a.seqs.empty()) op.attrs["kv_dtype"] = kv_dtype_name(a.seqs[0].kv.dtype);
  op.shapes = {{a.q.rows, a.n_heads, a.d_nope + a.d_rope}, {a.kv_lora_rank}, {a.d_rope}};
  // Sparse attention (lightning indexer): each query attends to at most `sparse_topk` keys.
  if (a.selected.rows > 0) op.attrs["sparse_topk"] = std::to_string(a.selected.cols);
  op.bytes_per_token = weight_bytes(a.w_kv_b);
  const KeyReach reach = a.reach ? *a.reach : KeyReach{.selected = a.selected.rows > 0 ? a.selected.cols : 0};
  for (const PagedSequence& s : a.seqs) {
    const double keys = keys_for(s.kv.length, reach).attended;
    mla_cost(op, a.form, s.q_rows, keys, a.n_heads, a.d_nope, a.d_rope, a.d_v, a.kv_lora_rank);
    op.bytes_per_token += keys * d((s.kv.first_width + a.d_rope) * kv_dtype_bytes(s.kv.dtype));
  }
  note(std::move(op));
  if (inner_) inner_->paged_mla_attention(a);
}

void RecordingBackend::indexer_topk(const IndexerTopkArgs& a) {
  OpSpec op;
  op.name = std::string(op::kIndexerTopk);
  op.attrs = {{"n_heads", std::to_string(a.n_heads)},
              {"head_dim", std::to_string(a.head_dim)},
              {"topk", std::to_string(a.selected.cols)}};
  if (a.key_ratio > 1) op.attrs["key_ratio"] = std::to_string(a.key_ratio);
  if (!a.seqs.empty()) op.attrs["kv_dtype"] = kv_dtype_name(a.seqs[0].kv.dtype);
  op.shapes = {{a.q.rows, a.n_heads, a.head_dim}, {a.head_dim}, {a.selected.cols}};
  // Every visible key (a compressed entry per key_ratio positions), then the selection.
  const KeyReach reach{
      .entry_ratio = a.key_ratio > 1 ? a.key_ratio : 0, .selected = a.selected.cols, .indexed = true};
  for (const PagedSequence& s : a.seqs) {
    const double keys = keys_for(s.kv.length, reach).indexed;
    op.flops_per_token += d(s.q_rows) * keys * lightning_index_flops_per_pair(a.n_heads, a.head_dim);
    op.bytes_per_token += keys * d(a.head_dim * kv_dtype_bytes(s.kv.dtype));
  }
  note(std::move(op));
  if (inner_) inner_->indexer_topk(a);
}

void RecordingBackend::block_indexer_topk(const BlockIndexerTopkArgs& a) {
  OpSpec op;
  op.name = std::string(op::kBlockIndexerTopk);
  const int64_t k = a.selected.cols / std::max<int64_t>(a.n_heads, 1);
  op.attrs = {{"n_heads", std::to_string(a.n_heads)},
              {"head_dim", std::to_string(a.head_dim)},
              {"block_size", std::to_string(a.block_size)},
              {"topk_blocks", std::to_string(k)},
              {"local_blocks", std::to_string(a.local_blocks)}};
  if (!a.seqs.empty()) op.attrs["kv_dtype"] = kv_dtype_name(a.seqs[0].kv.dtype);
  op.shapes = {{a.q.rows, a.n_heads, a.head_dim}, {a.head_dim}, {a.n_heads, k}};
  // Every visible key, then the blocks' selection.
  const KeyReach reach{.selected = k * a.block_size, .indexed = true};
  for (const PagedSequence& s : a.seqs) {
    const double keys = keys_for(s.kv.length, reach).indexed;
    op.flops_per_token += d(s.q_rows) * keys * block_index_flops_per_pair(a.n_heads, a.head_dim);
    op.bytes_per_token += keys * d(a.head_dim * kv_dtype_bytes(s.kv.dtype));
  }
  note(std::move(op));
  if (inner_) inner_->block_indexer_topk(a);
}

void RecordingBackend::causal_conv1d(const CausalConv1dArgs& a) {
  OpSpec op = elementwise(op::kCausalConv1d, a.x.rows, a.x.cols, 2.0 * d(a.kernel) + (a.silu ? 4.0 : 0.0));
  op.attrs = {{"kernel", std::to_string(a.kernel)}, {"window_dtype", kv_dtype_name(a.window_dtype)}};
  if (a.silu) op.attrs["activation"] = "silu";
  // The taps, and each sequence's window read and written once.
  if (!a.bias.empty()) op.attrs["bias"] = "true";
  op.bytes_per_token = 4.0 * d(static_cast<int64_t>(a.weight.size() + a.bias.size())) +
                       2.0 * d(static_cast<int64_t>(a.seqs.size())) * d((a.kernel - 1) * a.x.cols) *
                           d(kv_dtype_bytes(a.window_dtype));
  note(std::move(op));
  if (inner_) inner_->causal_conv1d(a);
}

void RecordingBackend::gated_delta_rule(const GatedDeltaRuleArgs& a) {
  OpSpec op;
  op.name = std::string(op::kGatedDeltaRule);
  op.attrs = {{"n_key_heads", std::to_string(a.n_key_heads)},
              {"n_value_heads", std::to_string(a.n_value_heads)},
              {"key_head_dim", std::to_string(a.key_head_dim)},
              {"value_head_dim", std::to_string(a.value_head_dim)},
              {"state", "f32"}};
  if (a.l2_normalize) op.attrs["l2_normalize"] = "true";
  op.shapes = {{a.q.rows, a.n_value_heads, a.key_head_dim, a.value_head_dim}};
  // Per token and value head: decay, S^T k, the rank-1 update and S^T q over d_k x d_v (about 7 flops
  // each), the state read and written once.
  const double state = d(a.n_value_heads) * d(a.key_head_dim) * d(a.value_head_dim);
  op.flops_per_token = d(a.q.rows) * 7.0 * state;
  op.bytes_per_token = d(a.q.rows) * 8.0 * state;
  note(std::move(op));
  if (inner_) inner_->gated_delta_rule(a);
}

void RecordingBackend::ssm_scan(const SsmScanArgs& a) {
  OpSpec op;
  op.name = std::string(op::kSsmScan);
  op.attrs = {{"n_heads", std::to_string(a.n_heads)},
              {"head_dim", std::to_string(a.head_dim)},
              {"n_groups", std::to_string(a.n_groups)},
              {"state_size", std::to_string(a.state_size)},
              {"state", "f32"}};
  op.shapes = {{a.x.rows, a.n_heads, a.head_dim, a.state_size}};
  // Per token and head: decay, the rank-1 update and S c over head_dim x state_size (about 5 flops
  // each), the state read and written once.
  const double state = d(a.n_heads) * d(a.head_dim) * d(a.state_size);
  op.flops_per_token = d(a.x.rows) * 5.0 * state;
  op.bytes_per_token = d(a.x.rows) * 8.0 * state;
  note(std::move(op));
  if (inner_) inner_->ssm_scan(a);
}

void RecordingBackend::gated_rms_norm(const GatedRmsNormArgs& a) {
  OpSpec op = elementwise(op::kGatedRmsNorm, a.x.rows, a.x.cols, 9.0);
  op.attrs["eps"] = format_g(a.eps);
  op.bytes_per_token = 4.0 * d(static_cast<int64_t>(a.weight.size()));
  note(std::move(op));
  if (inner_) inner_->gated_rms_norm(a);
}

void RecordingBackend::softmax(const SoftmaxArgs& a) {
  note(elementwise(op::kSoftmax, a.x.rows, a.x.cols, 5.0));
  if (inner_) inner_->softmax(a);
}

void RecordingBackend::silu(const UnaryArgs& a) {
  note(elementwise(op::kSilu, a.x.rows, a.x.cols, 4.0));
  if (inner_) inner_->silu(a);
}

void RecordingBackend::gelu(const UnaryArgs& a) {
  OpSpec op = elementwise(op::kGelu, a.x.rows, a.x.cols, 8.0);
  op.attrs["approximate"] = a.gelu == GeluApprox::kTanh ? "tanh" : "none";
  note(std::move(op));
  if (inner_) inner_->gelu(a);
}

void RecordingBackend::sigmoid(const UnaryArgs& a) {
  note(elementwise(op::kSigmoid, a.x.rows, a.x.cols, 4.0));
  if (inner_) inner_->sigmoid(a);
}

void RecordingBackend::softplus(const UnaryArgs& a) {
  note(elementwise(op::kSoftplus, a.x.rows, a.x.cols, 4.0));
  if (inner_) inner_->softplus(a);
}
void RecordingBackend::tanh(const UnaryArgs& a) {
  note(elementwise(op::kTanh, a.x.rows, a.x.cols, 4.0));
  if (inner_) inner_->tanh(a);
}

void RecordingBackend::swiglu(const SwigluArgs& a) {
  OpSpec op = elementwise(op::kSwiglu, a.out.rows, a.out.cols, 5.0);
  if (a.interleaved) op.attrs["layout"] = "interleaved";
  note(std::move(op));
  if (inner_) inner_->swiglu(a);
}

void RecordingBackend::swiglu_clamped(const SwigluArgs& a) {
  OpSpec op = elementwise(op::kSwigluClamped, a.out.rows, a.out.cols, 8.0);
  op.attrs = {{"limit", format_g(a.limit)}, {"alpha", format_g(a.alpha)}};
  if (a.up_shift != 1.0f) op.attrs["up_shift"] = format_g(a.up_shift);
  if (a.interleaved) op.attrs["layout"] = "interleaved";
  note(std::move(op));
  if (inner_) inner_->swiglu_clamped(a);
}

void RecordingBackend::moe_router(const MoeRouterArgs& a) {
  OpSpec op = elementwise(op::kMoeRouter, a.logits.rows, a.logits.cols, 4.0);
  const char* scoring = a.scoring == RouterScoring::kSigmoid        ? "sigmoid"
                        : a.scoring == RouterScoring::kSqrtSoftplus ? "sqrtsoftplus"
                                                                    : "softmax";
  op.attrs = {{"scoring", scoring},
              {"topk_method", topk_method_name(a.method)},
              {"n_experts", std::to_string(a.logits.cols)},
              {"top_k", std::to_string(a.top_k)}};
  if (a.n_group > 1) op.attrs["groups"] = fmt::format("{}/{}", a.topk_group, a.n_group);
  if (!a.correction_bias.empty() && !a.hashed()) op.attrs["correction_bias"] = "true";
  if (a.hashed()) op.attrs["topk_method"] = "token_hash";
  if (a.norm_topk_prob) op.attrs["renormalize"] = "true";
  if (a.routed_scaling_factor != 1.0f) op.attrs["routed_scaling_factor"] = format_g(a.routed_scaling_factor);
  note(std::move(op));
  if (inner_) inner_->moe_router(a);
}

void RecordingBackend::moe_experts(const MoeExpertsArgs& a) {
  OpSpec op;
  op.name = std::string(op::kMoeExperts);
  const int64_t k = a.expert_ids.cols;
  op.attrs = {{"n_experts", std::to_string(a.experts.size())},
              {"top_k", std::to_string(k)},
              {"layout", layout_name(a.layout)}};
  if (a.clamped) {
    op.attrs["limit"] = format_g(a.limit);
    op.attrs["alpha"] = format_g(a.alpha);
    if (a.up_shift != 1.0f) op.attrs["up_shift"] = format_g(a.up_shift);
  }
  if (a.input_scaling) op.attrs["input_scaling"] = "true";
  if (a.relu2) op.attrs["activation"] = "relu2";
  if (a.gelu_tanh) op.attrs["activation"] = "gelu_tanh";
  if (a.n_zero_experts > 0) op.attrs["zero_experts"] = std::to_string(a.n_zero_experts);
  if (a.routed_experts() != static_cast<int64_t>(a.experts.size())) {  // an expert-parallel rank's block
    op.attrs["n_experts"] = std::to_string(a.routed_experts());
    op.attrs["experts_held"] = std::to_string(a.experts.size());
  }
  if (!a.exact) op.attrs["exact"] = "false";
  if (!a.experts.empty()) {
    const ExpertWeights& e = a.experts[0];
    set_weights(op, e.down);
    // "mlp.experts.*.down_proj" / "mlp.experts.down_proj" -> "mlp.experts"
    std::string label = op.label;
    if (const size_t dot = label.rfind('.'); dot != std::string::npos) label.resize(dot);
    if (label.ends_with(".*")) label.resize(label.size() - 2);
    op.label = label;
    if (e.gate_bias != nullptr || e.down_bias != nullptr) op.attrs["bias"] = "true";
    const bool separate = a.layout == GateUpLayout::kSeparate;
    const int64_t width = e.down.cols;  // I
    op.shapes = {{a.x.rows, a.x.cols}, {e.gate.rows, e.gate.cols}, {e.down.rows, e.down.cols}};
    const double weights = d(e.gate.rows * e.gate.cols) + (separate ? d(e.up.rows * e.up.cols) : 0.0) +
                           d(e.down.rows * e.down.cols);
    const double per_pair_bytes =
        weight_bytes(e.gate) + (separate ? weight_bytes(e.up) : 0.0) + weight_bytes(e.down);
    const double pairs = d(a.x.rows) * d(k);  // token-expert pairs (a decoded token reads k experts)
    op.matmul_flops_per_token = 2.0 * pairs * weights;
    op.flops_per_token = op.matmul_flops_per_token +
                         pairs * (d(width) * (a.clamped || a.gelu_tanh ? 8.0 : 5.0) + 2.0 * d(a.x.cols));
    op.bytes_per_token = pairs * per_pair_bytes;
  }
  note(std::move(op));
  if (inner_) inner_->moe_experts(a);
}

namespace {

OpSpec binary(std::string_view name, const BinaryArgs& a) {
  OpSpec op = elementwise(name, a.a.rows, a.a.cols, 1.0);
  if (a.b.rows != a.a.rows) op.attrs["broadcast"] = "rows";
  if (a.b.cols != a.a.cols) op.attrs["broadcast"] = a.b.rows != a.a.rows ? "scalar" : "columns";
  return op;
}

}  // namespace

void RecordingBackend::kv_compress(const KvCompressArgs& a) {
  // Each kv element: its gate's exp, a sum and a product-add (twice with overlap: its two windows).
  OpSpec op = elementwise(op::kKvCompress, a.kv.rows, a.kv.cols, 6.0);
  op.attrs = {{"ratio", std::to_string(a.ratio)}};
  if (a.overlap) op.attrs["overlap"] = "true";
  if (a.bf16_steps) op.attrs["bf16_steps"] = "true";
  note(std::move(op));
  if (inner_) inner_->kv_compress(a);
}

void RecordingBackend::hc_weights(const HcWeightsArgs& a) {
  OpSpec op = elementwise(op::kHcWeights, a.mixes.rows, a.mixes.cols, 8.0);
  const int64_t n = a.n_streams;
  // Each Sinkhorn iteration sums and divides every comb entry twice (rows, then columns).
  if (!a.head()) op.flops_per_token += 4.0 * d(a.mixes.rows) * d(a.sinkhorn_iters) * d(n * n);
  op.attrs = {{"n_streams", std::to_string(n)}, {"sinkhorn_iters", std::to_string(a.sinkhorn_iters)}};
  if (a.head()) op.attrs["outputs"] = "pre";
  note(std::move(op));
  if (inner_) inner_->hc_weights(a);
}

void RecordingBackend::hc_collapse(const HcCollapseArgs& a) {
  OpSpec op = elementwise(op::kHcCollapse, a.streams.rows, a.streams.cols, 2.0);
  op.attrs = {{"n_streams", std::to_string(a.n_streams)}};
  note(std::move(op));
  if (inner_) inner_->hc_collapse(a);
}

void RecordingBackend::hc_expand(const HcExpandArgs& a) {
  // Each of the n H outputs: post times x plus n products of comb and a stream.
  OpSpec op = elementwise(op::kHcExpand, a.out.rows, a.out.cols, 2.0 * d(a.n_streams + 1));
  op.attrs = {{"n_streams", std::to_string(a.n_streams)}};
  if (a.bf16_steps) op.attrs["bf16_steps"] = "true";
  note(std::move(op));
  if (inner_) inner_->hc_expand(a);
}

void RecordingBackend::add(const BinaryArgs& a) {
  note(binary(op::kAdd, a));
  if (inner_) inner_->add(a);
}

void RecordingBackend::mul(const BinaryArgs& a) {
  note(binary(op::kMul, a));
  if (inner_) inner_->mul(a);
}

void RecordingBackend::argmax(const ArgmaxArgs& a) {
  note(elementwise(op::kArgmax, a.x.rows, a.x.cols, 1.0));
  if (inner_) {
    inner_->argmax(a);
  } else {
    std::fill(a.out.begin(), a.out.end(), 0);
  }
}

void RecordingBackend::sample(const SampleArgs& a) {
  OpSpec op = elementwise(op::kSample, a.logits.rows, a.logits.cols, 5.0);
  if (a.top_k > 0) op.attrs["top_k"] = std::to_string(a.top_k);
  if (a.top_p < 1.0f) op.attrs["top_p"] = format_g(a.top_p);
  note(std::move(op));
  if (inner_) {
    inner_->sample(a);
  } else {
    std::fill(a.out.begin(), a.out.end(), 0);
  }
}

void RecordingBackend::kv_write(const KvWriteArgs& a) {
  OpSpec op;
  op.name = std::string(op::kKvWrite);
  op.attrs = {{"kv_dtype", kv_dtype_name(a.pool.dtype)}};
  op.shapes = {{a.first.rows, a.pool.first_width}, {a.second.rows, a.pool.second_width}};
  op.flops_per_token = d(a.first.rows) * d(a.pool.first_width + a.pool.second_width);  // conversions
  op.bytes_per_token =
      d(a.first.rows) * d((a.pool.first_width + a.pool.second_width) * kv_dtype_bytes(a.pool.dtype));
  note(std::move(op));
  if (inner_) inner_->kv_write(a);
}

void RecordingBackend::kv_copy_blocks(const KvCopyBlocksArgs& a) {
  OpSpec op;
  op.name = std::string(op::kKvCopyBlocks);
  op.attrs = {{"kv_dtype", kv_dtype_name(a.pool.dtype)}};
  op.shapes = {{static_cast<int64_t>(a.src.size()), a.pool.block_tokens}};
  for (int32_t rows : a.rows)
    op.bytes_per_token +=
        2.0 * d(rows) * d((a.pool.first_width + a.pool.second_width) * kv_dtype_bytes(a.pool.dtype));
  note(std::move(op));
  if (inner_) inner_->kv_copy_blocks(a);
}

void RecordingBackend::clamp(const PointwiseArgs& a) {
  note(elementwise(op::kClamp, a.x.rows, a.x.cols, 1.0));
  if (inner_) inner_->clamp(a);
}

void RecordingBackend::scale(const PointwiseArgs& a) {
  note(elementwise(op::kScale, a.x.rows, a.x.cols, 2.0));
  if (inner_) inner_->scale(a);
}

void RecordingBackend::rsqrt(const PointwiseArgs& a) {
  note(elementwise(op::kRsqrt, a.x.rows, a.x.cols, 2.0));
  if (inner_) inner_->rsqrt(a);
}

void RecordingBackend::row_mean(const PointwiseArgs& a) {
  note(elementwise(op::kRowMean, a.x.rows, a.x.cols, 1.0));
  if (inner_) inner_->row_mean(a);
}

void RecordingBackend::round_bf16(const PointwiseArgs& a) {
  note(elementwise(op::kRoundBf16, a.x.rows, a.x.cols, 1.0));
  if (inner_) inner_->round_bf16(a);
}

void RecordingBackend::copy_columns(const CopyColumnsArgs& a) {
  note(elementwise(op::kCopyColumns, a.x.rows, a.groups * a.width, 0.0));
  if (inner_) inner_->copy_columns(a);
}

void RecordingBackend::gather_rows(const GatherRowsArgs& a) {
  note(elementwise(op::kGatherRows, static_cast<int64_t>(a.idx.size()), a.x.cols, 0.0));
  if (inner_) inner_->gather_rows(a);
}

void RecordingBackend::scatter_add(const ScatterAddArgs& a) {
  note(elementwise(op::kScatterAdd, a.x.rows, a.x.cols, 2.0));
  if (inner_) inner_->scatter_add(a);
}

}  // namespace day0
