#include "day0/graph/coverage.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "day0/core/human.h"
#include "day0/ops/op_names.h"
#include "day0/ops/op_schema.h"

namespace day0 {

namespace {

// Where an op name comes from in a config, to point at the fields that introduced an op we lack.
std::string config_fields_for(std::string_view op, const OpSpec& spec) {
  static const std::map<std::string_view, std::string_view> kFields = {
      {op::kMlaAttention, "kv_lora_rank, q_lora_rank, qk_rope_head_dim"},
      {op::kPagedMlaAttention, "kv_lora_rank, q_lora_rank, qk_rope_head_dim"},
      {op::kMoeRouter, "num_experts / n_routed_experts, scoring_func, topk_method"},
      {op::kMoeExperts, "num_experts_per_tok, moe_intermediate_size"},
      {op::kSwigluClamped, "swiglu_limit, swiglu_alpha"},
      {op::kLayerNorm, "norm type"},
      {op::kGelu, "hidden_act"},
      {op::kRope, "rope_scaling, partial_rotary_factor, rope_theta"},
      {op::kAttention, "sliding_window, layer_types, attention_chunk_size"},
      {op::kPagedAttention, "sliding_window, layer_types, attention_chunk_size"},
      {op::kKvCompress, "layer_types / compress_ratios, compress_rates"},
      {op::kGroupedMatmul, "o_groups, o_lora_rank"},
      {op::kHcWeights, "hc_mult, hc_sinkhorn_iters, hc_eps"},
      {op::kHcCollapse, "hc_mult"},
      {op::kHcExpand, "hc_mult"},
      {op::kBlockIndexerTopk, "layer_types, index_block_size, index_topk_blocks, index_local_blocks"},
  };
  auto it = kFields.find(op);
  std::string out = it != kFields.end() ? std::string(it->second) : "unknown to the op registry";
  out += fmt::format(" [{}", spec.label);
  for (const auto& [k, v] : spec.attrs) out += fmt::format(" {}={}", k, v);
  return out + "]";
}

double share(double part, double total) {
  return total > 0 ? part / total : 0.0;
}

std::string percent(double x) {
  return fmt::format("{:.1f}%", 100.0 * x);
}

// Columns padded to the widest cell; right-aligned where `right` says so.
std::string aligned(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool r = c < right.size() && right[c];
      line += r ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
      if (c + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string placement_cell(const Resolution& r) {
  if (r.placement != Placement::kDecomposed) return placement_name(r.placement);
  return fmt::format("decomposed: {}", fmt::join(r.pieces, ", "));
}

}  // namespace

bool CoverageReport::failed() const {
  return ops[static_cast<int>(Placement::kMissing)] > 0 ||
         (strict_ops && ops[static_cast<int>(Placement::kHostFallback)] > 0);
}

std::string op_steps(const OpSpec& op) {
  if (op.prefill && op.decode) return "prefill+decode";
  return op.prefill ? "prefill" : "decode";
}

Result<CoverageReport> compute_coverage(const std::string& model_name, const OpList& list,
                                        std::string_view backend, const BackendOptions& options) {
  D0_ASSIGN_OR_RETURN(auto primary, make_backend(backend, options));
  const std::string host_name = backend == "reference" ? "reference" : "cpu";
  D0_ASSIGN_OR_RETURN(auto host, make_backend(host_name, options));
  CoverageReport report;
  report.model = model_name;
  report.backend = std::string(backend);
  report.host = host_name;
  report.strict_ops = options.strict_ops;
  report.context_tokens = list.context_tokens;
  report.bf16_activations = list.bf16_activations;
  report.rows.reserve(list.ops.size());
  for (const OpSpec& op : list.ops) {
    CoverageRow row;
    row.op = op;
    row.key = {row.op.name, op.weights};
    row.resolution = resolve_op(*primary, host.get(), row.key);
    if (row.resolution.placement == Placement::kMissing) row.introduced_by = config_fields_for(op.name, op);
    const auto p = static_cast<size_t>(row.resolution.placement);
    report.flops[p] += op.flops_per_token;
    report.bytes[p] += op.bytes_per_token;
    report.ops[p] += 1;
    report.total_flops += op.flops_per_token;
    report.total_bytes += op.bytes_per_token;
    report.rows.push_back(std::move(row));
  }
  for (auto& row : report.rows) row.key.op = row.op.name;  // re-point after the moves
  return report;
}

std::string coverage_text(const CoverageReport& r) {
  std::string out = fmt::format(
      "coverage of {} on backend '{}' (host fallback: '{}'{}): every kernel one prefill and one decode "
      "step call (recorded{}), costs per decoded token at context {}\n\n",
      r.model, r.backend, r.host, r.strict_ops ? ", --strict-ops" : "",
      r.bf16_activations ? " with BF16 activations: the integer kernels of a quantized checkpoint" : "",
      r.context_tokens);
  std::vector<std::vector<std::string>> rows = {
      {"op", "where", "weights", "steps", "calls", "FLOPs", "bytes", "placement"}};
  for (const auto& row : r.rows) {
    const OpSchema* s = find_op_schema(row.op.name);
    rows.push_back({row.op.name, row.op.label.empty() ? "-" : row.op.label,
                    s && s->reads_weights ? weight_format_name(row.key.weights) : "-", op_steps(row.op),
                    std::to_string(row.op.calls_per_token),
                    percent(share(row.op.flops_per_token, r.total_flops)),
                    percent(share(row.op.bytes_per_token, r.total_bytes)), placement_cell(row.resolution)});
  }
  out += aligned(rows, {false, false, false, false, true, true, true, false});
  out += "\n";
  std::vector<std::vector<std::string>> summary = {{"class", "ops", "FLOPs share", "bytes share"}};
  for (Placement p :
       {Placement::kNative, Placement::kDecomposed, Placement::kHostFallback, Placement::kMissing}) {
    const auto i = static_cast<size_t>(p);
    summary.push_back({placement_name(p), std::to_string(r.ops[i]), percent(share(r.flops[i], r.total_flops)),
                       percent(share(r.bytes[i], r.total_bytes))});
  }
  out += aligned(summary, {false, true, true, true});
  out += fmt::format("\n  total per token: {}FLOP, {}\n", human_count(r.total_flops),
                     human_bytes(r.total_bytes));
  for (const auto& row : r.rows) {
    if (row.resolution.placement == Placement::kMissing) {
      out += fmt::format("  missing: {} ({}) introduced by: {}\n", row.op.name,
                         weight_format_name(row.key.weights), row.introduced_by);
    }
  }
  if (r.strict_ops && r.ops[static_cast<size_t>(Placement::kHostFallback)] > 0) {
    out += "  --strict-ops: host fallback is an error\n";
  }
  out += fmt::format("\nverdict: {}\n", r.failed() ? "FAIL" : "ok");
  return out;
}

nlohmann::json coverage_json(const CoverageReport& r) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& row : r.rows) {
    nlohmann::json j = {{"op", row.op.name},
                        {"label", row.op.label},
                        {"weights", weight_format_name(row.key.weights)},
                        {"attrs", row.op.attrs},
                        {"steps", op_steps(row.op)},
                        {"calls_per_token", row.op.calls_per_token},
                        {"flops_per_token", row.op.flops_per_token},
                        {"bytes_per_token", row.op.bytes_per_token},
                        {"placement", placement_name(row.resolution.placement)},
                        {"decomposed_into", row.resolution.pieces}};
    if (!row.introduced_by.empty()) j["introduced_by"] = row.introduced_by;
    ops.push_back(std::move(j));
  }
  nlohmann::json classes = nlohmann::json::object();
  for (Placement p :
       {Placement::kNative, Placement::kDecomposed, Placement::kHostFallback, Placement::kMissing}) {
    const auto i = static_cast<size_t>(p);
    classes[placement_name(p)] = {{"ops", r.ops[i]},
                                  {"flops_share", share(r.flops[i], r.total_flops)},
                                  {"bytes_share", share(r.bytes[i], r.total_bytes)}};
  }
  return {{"model", r.model},
          {"backend", r.backend},
          {"host_backend", r.host},
          {"strict_ops", r.strict_ops},
          {"context_tokens", r.context_tokens},
          {"bf16_activations", r.bf16_activations},
          {"total_flops_per_token", r.total_flops},
          {"total_bytes_per_token", r.total_bytes},
          {"classes", classes},
          {"ops", ops},
          {"ok", !r.failed()}};
}

namespace {

struct MatrixCell {
  std::string op;
  std::string format;                   // "-" for ops without weights
  std::vector<std::string> placements;  // per backend
};

std::vector<MatrixCell> support_matrix() {
  BackendOptions opts;
  opts.n_threads = 1;
  std::vector<std::unique_ptr<Backend>> backends;
  for (const auto& name : backend_names()) backends.push_back(std::move(make_backend(name, opts).value()));
  auto host = std::move(make_backend("cpu", opts).value());
  std::vector<MatrixCell> out;
  for (const auto& s : op_schemas()) {
    std::vector<WeightFormat> formats;
    if (s.reads_weights) {
      formats.assign(std::begin(kAllWeightFormats), std::end(kAllWeightFormats));
    } else {
      formats = {WeightFormat::kF32};
    }
    for (WeightFormat f : formats) {
      MatrixCell cell{std::string(s.name), s.reads_weights ? weight_format_name(f) : "-", {}};
      for (size_t b = 0; b < backends.size(); ++b) {
        const Backend* h = backend_names()[b] == "reference" ? nullptr : host.get();
        cell.placements.push_back(placement_name(resolve_op(*backends[b], h, {s.name, f}).placement));
      }
      out.push_back(std::move(cell));
    }
  }
  return out;
}

}  // namespace

std::string support_matrix_text() {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"op", "weights"};
  for (const auto& b : backend_names()) header.push_back(b);
  rows.push_back(header);
  for (const auto& cell : support_matrix()) {
    std::vector<std::string> row = {cell.op, cell.format};
    row.insert(row.end(), cell.placements.begin(), cell.placements.end());
    rows.push_back(std::move(row));
  }
  return "op x backend x weight-format support (from the registry; activations are float32)\n\n" +
         aligned(rows, {});
}

nlohmann::json support_matrix_json() {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& cell : support_matrix()) {
    nlohmann::json per_backend = nlohmann::json::object();
    for (size_t b = 0; b < cell.placements.size(); ++b) per_backend[backend_names()[b]] = cell.placements[b];
    rows.push_back({{"op", cell.op}, {"weights", cell.format}, {"backends", per_backend}});
  }
  return {{"backends", backend_names()}, {"matrix", rows}};
}

}  // namespace day0
