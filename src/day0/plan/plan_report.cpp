#include "day0/plan/plan_report.h"

#include "day0/plan/launch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "day0/core/error.h"
#include "day0/core/human.h"

namespace day0::plan {

namespace {

// Why no layout of this model runs yet: the engine has no block for its mechanisms.
std::string not_runnable_model(const ModelCost& m) {
  return fmt::format("the engine has no block for {}", fmt::join(m.unimplemented, ", "));
}

using nlohmann::json;

// Columns right-aligned except the first `left` ones; every row has the header's width.
std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows, size_t left = 0) {
  std::vector<size_t> width(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows) {
    D0_CHECK(row.size() == header.size());
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = " ";
    for (size_t i = 0; i < cells.size(); ++i) {
      out +=
          i < left ? fmt::format(" {:<{}}", cells[i], width[i]) : fmt::format(" {:>{}}", cells[i], width[i]);
    }
    out.erase(out.find_last_not_of(' ') + 1);
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

std::string degrees(const Parallelism& p) {
  return fmt::format("TP {} x PP {} x DP {}, EP {}", p.tp, p.pp, p.dp, p.ep);
}

double model_weight_bytes(const ModelCost& m, const Workload& w, const DeviceSpec& device) {
  const PreparedModel p = prepare_model(m, w, device);
  double total = p.embedding_bytes + p.final_norm_bytes + (m.tied_embeddings ? 0 : p.lm_head_bytes);
  for (const auto& layer : p.layer_bytes) {
    for (double b : layer) total += b;
  }
  return total;
}

std::string model_line(const ModelCost& m) {
  std::string s = fmt::format("{} params ({} active a token), {} layers, hidden {}, {} heads",
                              human_count(m.total_params()), human_count(m.active_params_per_token()),
                              m.n_layers(), m.hidden, m.n_heads);
  s += m.mla ? ", MLA" : fmt::format(" / {} kv heads", m.n_kv_heads);
  if (m.n_experts > 0) s += fmt::format(", {} experts top-{:g}", m.n_experts, m.experts_per_token);
  return s;
}

json memory_json(const MemoryEstimate& m) {
  json items = json::object();
  for (int i = 0; i < kMemoryItems; ++i) items[memory_item_name(static_cast<MemoryItem>(i))] = m.items[i];
  return {{"items_bytes", items},
          {"total_bytes", m.total},
          {"capacity_bytes", m.capacity},
          {"stage", m.stage},
          {"kv_capacity_tokens", m.kv_capacity_tokens},
          {"max_sequences_at_context", m.max_sequences_at_context}};
}

json comm_json(const CommTime& t) {
  return {{"transfer", t.transfer},
          {"skew_wait", t.skew},
          {"expert_imbalance_wait", t.imbalance},
          {"pipeline_bubble", t.bubble}};
}

json candidate_json(const PlanCandidate& c, const PlanReportInput& in) {
  json j = {{"tp", c.par.tp},
            {"pp", c.par.pp},
            {"dp", c.par.dp},
            {"ep", c.par.ep},
            {"expert_tp", c.par.expert_tp()},
            {"devices", c.par.devices()},
            {"feasible", c.feasible},
            {"memory", memory_json(c.memory)}};
  if (c.feasible) {
    j["ttft_s"] = c.time.ttft;
    j["tpot_s"] = c.time.tpot;
    j["tokens_per_s"] = c.time.tokens_per_s;
    j["tokens_per_s_per_device"] = c.time.tokens_per_s_per_device;
    j["comm_share"] = c.time.comm_share;
    j["idle_ratio"] = c.time.idle_ratio;
    j["decode_comm_s"] = comm_json(c.time.decode);
    j["prefill_comm_s"] = comm_json(c.time.prefill);
    j["decode_memory_bound"] = c.time.decode_memory_bound;
    const std::string line = launch_line(c, in.model_arg, *in.workload, *in.cluster, in.launcher);
    if (!in.model->unimplemented.empty()) {
      j["launch_not_runnable"] = not_runnable_model(*in.model);
    } else if (!line.empty()) {
      j["launch"] = line;
    } else {
      j["launch_not_runnable"] = runtime_layout(c.par).not_runnable;
    }
  } else {
    j["reason"] = over_memory_reason(c, *in.workload);
  }
  return j;
}

// The launch line, or why Day0 cannot run the layout yet.
std::string launch_text(const PlanCandidate& c, const PlanReportInput& in, const ClusterSpec& cluster) {
  if (!in.model->unimplemented.empty())
    return "(not runnable by day0 yet: " + not_runnable_model(*in.model) + ")";
  const std::string line = launch_line(c, in.model_arg, *in.workload, cluster, in.launcher);
  return line.empty() ? "(not runnable by day0 yet: " + runtime_layout(c.par).not_runnable + ")" : line;
}

std::string percent(double fraction) {
  return fmt::format("{:.1f}%", 100 * fraction);
}

std::vector<std::string> plan_row(size_t index, const PlanCandidate& c) {
  return {std::to_string(index),
          std::to_string(c.par.tp),
          std::to_string(c.par.pp),
          std::to_string(c.par.dp),
          std::to_string(c.par.ep),
          std::to_string(c.par.devices()),
          fmt::format("{} / {}", human_bytes(c.memory.total), human_bytes(c.memory.capacity)),
          human_count(c.memory.kv_capacity_tokens),
          with_commas(c.memory.max_sequences_at_context),
          human_seconds(c.time.ttft),
          human_seconds(c.time.tpot),
          with_commas(static_cast<int64_t>(c.time.tokens_per_s)),
          fmt::format("{:.1f}", c.time.tokens_per_s_per_device),
          percent(c.time.comm_share),
          percent(c.time.tpot > 0 ? c.time.decode.wait() / c.time.tpot : 0)};
}

std::vector<std::string> memory_row(size_t index, const PlanCandidate& c) {
  std::vector<std::string> row = {std::to_string(index), std::to_string(c.memory.stage)};
  for (double b : c.memory.items) row.push_back(human_bytes(b));
  row.push_back(human_bytes(c.memory.total));
  return row;
}

}  // namespace

const std::vector<std::string>& estimate_caveats() {
  static const std::vector<std::string> kCaveats = {
      "Estimates, not measurements: a roofline per layer at 100% of the spec-sheet bandwidth and FLOP/s, "
      "plus idealised ring all-reduce, all-to-all and point-to-point transfers.",
      "Waits (the 'wait' column, a share of TPOT): ranks reaching each collective at different times "
      "(the cluster's sync_skew), the EP rank with the most routed work under uniform routing, and "
      "pipeline stages idle while the others work; 'transfer' is the links' time alone.",
      "Ignored: kernel efficiency and launch overheads, overlap of compute and communication, routers "
      "less even than uniform (and --redundant-experts against it), scheduler and CUDA-graph overheads, "
      "prefix caching, speculative decoding and MTP layers, PP micro-batch interleaving in decode.",
      "Decode is charged at the full context for every sequence; TTFT prefills one context-long prompt "
      "alone, chunk by chunk.",
      "Memory: weights by sharding rule, paged KV cache at context x concurrency, prefill-chunk "
      "activations and MoE buffers, and a reserve for runtime context, collectives and fragmentation.",
  };
  return kCaveats;
}

std::string format_plan_text(const PlanReportInput& in) {
  const ModelCost& m = *in.model;
  const ClusterSpec& c = *in.cluster;
  const Workload& w = *in.workload;
  const PlanResult& r = *in.result;
  std::string out;
  out += fmt::format("model      {}: {}\n", m.name, model_line(m));
  const auto table = weight_table(m.total_params());
  std::string widths;
  for (const auto& row : table)
    widths += fmt::format("{}{} {}", widths.empty() ? "" : ", ", row.dtype, human_bytes(row.bytes));
  out +=
      fmt::format("weights    {} as planned ({}); plain table: {}\n",
                  human_bytes(model_weight_bytes(m, w, c.device)), weight_precision_name(w.weights), widths);
  out += fmt::format("KV cache   {} bytes a token over all layers ({})\n",
                     with_commas(static_cast<int64_t>(m.kv_bytes_per_token(w.kv))), kv_precision_name(w.kv));
  if (m.state_bytes_per_sequence() > 0) {
    out += fmt::format(
        "state      {} bytes a sequence, fixed (linear-attention / Mamba-2 layers' recurrent state); {} "
        "a running sequence (live + its snapshot at the last whole block), as planned\n",
        with_commas(static_cast<int64_t>(m.state_bytes_per_sequence())),
        with_commas(static_cast<int64_t>(2 * m.state_bytes_per_sequence())));
  }
  out += fmt::format("cluster    {}: {} node{} x {} {} ({} memory, {}/s, {}FLOP/s BF16)\n", c.name, c.nodes,
                     c.nodes == 1 ? "" : "s", c.devices_per_node, c.device.name,
                     human_bytes_binary(c.device.memory_bytes), human_bytes(c.device.memory_bandwidth),
                     human_count(c.device.peak_flops_bf16));
  out += fmt::format("workload   context {}, concurrency {}, KV {}, objective {}, reserve {:.0f}%\n",
                     with_commas(w.context), with_commas(w.concurrency), kv_precision_name(w.kv),
                     objective_name(w.objective), w.reserve_fraction * 100);
  out +=
      fmt::format("layouts    {} costed: {} fit, {} over memory; {} refused by divisibility or placement\n\n",
                  r.n_costed, r.feasible.size(), r.over_memory.size(), r.n_structural);

  if (r.feasible.empty()) {
    out += fmt::format("DOES NOT FIT on {} for this workload.\n", c.name);
    if (!r.over_memory.empty())
      out += fmt::format("closest layout {}: {}\n", degrees(r.over_memory.front().par),
                         over_memory_reason(r.over_memory.front(), w));
    if (r.smallest_cluster) {
      const PlanCandidate& u = *r.smallest_cluster_unit;
      out += fmt::format("smallest cluster of {} that holds it: {} ({} devices), unit {} on {} devices\n",
                         c.device.name, r.smallest_cluster->name, r.smallest_cluster->total_devices(),
                         degrees(u.par), u.par.devices());
      out += fmt::format("launch     {}\n", launch_text(u, in, *r.smallest_cluster));
    } else {
      out += fmt::format("no cluster of up to the searched size of {} nodes holds it.\n", c.device.name);
    }
  } else {
    const size_t n = std::min(r.feasible.size(), static_cast<size_t>(std::max(1, in.top)));
    std::vector<std::vector<std::string>> rows, mem_rows;
    for (size_t i = 0; i < n; ++i) {
      rows.push_back(plan_row(i + 1, r.feasible[i]));
      mem_rows.push_back(memory_row(i + 1, r.feasible[i]));
    }
    out += fmt::format("best {} of {} layouts ({}):\n", n, r.feasible.size(), objective_name(w.objective));
    out += render_table({"#", "TP", "PP", "DP", "EP", "devices", "memory/device", "KV tokens", "max seqs",
                         "TTFT", "TPOT", "tokens/s", "tok/s/dev", "transfer", "wait"},
                        rows);
    out += "\nmemory per device (most loaded stage):\n";
    std::vector<std::string> header = {"#", "stage"};
    for (int i = 0; i < kMemoryItems; ++i) header.emplace_back(memory_item_name(static_cast<MemoryItem>(i)));
    header.emplace_back("total");
    out += render_table(header, mem_rows);
    out += "\nlaunch:\n";
    for (size_t i = 0; i < n; ++i) out += fmt::format("  {}. {}\n", i + 1, launch_text(r.feasible[i], in, c));
    if (r.smallest_unit) {
      out += fmt::format("\nsmallest deployment unit: {} devices ({})\n", r.smallest_unit->par.devices(),
                         degrees(r.smallest_unit->par));
    }
  }
  if (in.explain) {
    out +=
        fmt::format("\nrejected layouts (first {} over memory, least overflow first):\n", in.explain_limit);
    const size_t n = std::min(r.over_memory.size(), static_cast<size_t>(in.explain_limit));
    for (size_t i = 0; i < n; ++i) {
      out +=
          fmt::format("  {}: {}\n", degrees(r.over_memory[i].par), over_memory_reason(r.over_memory[i], w));
    }
    out += fmt::format("refused before costing ({} in all; examples):\n", r.n_structural);
    for (const auto& s : r.structural) out += fmt::format("  {}: {}\n", degrees(s.par), s.reason);
  }
  out += "\n";
  for (const auto& caveat : estimate_caveats()) out += "note: " + caveat + "\n";
  return out;
}

json plan_to_json(const PlanReportInput& in) {
  const ModelCost& m = *in.model;
  const ClusterSpec& c = *in.cluster;
  const Workload& w = *in.workload;
  const PlanResult& r = *in.result;
  json table = json::object();
  for (const auto& row : weight_table(m.total_params())) table[row.dtype] = row.bytes;
  json j;
  j["model"] = {{"name", m.name},
                {"total_params", m.total_params()},
                {"active_params", m.active_params_per_token()},
                {"n_layers", m.n_layers()},
                {"mla", m.mla},
                {"n_experts", m.n_experts},
                {"weight_bytes_planned", model_weight_bytes(m, w, c.device)},
                {"weight_table_bytes", table},
                {"kv_bytes_per_token", m.kv_bytes_per_token(w.kv)},
                {"state_bytes_per_sequence", m.state_bytes_per_sequence()},
                {"state_bytes_per_running_sequence", 2 * m.state_bytes_per_sequence()}};
  j["cluster"] = {{"name", c.name},
                  {"nodes", c.nodes},
                  {"devices_per_node", c.devices_per_node},
                  {"device", c.device.name},
                  {"memory_bytes", c.device.memory_bytes},
                  {"memory_bandwidth", c.device.memory_bandwidth},
                  {"peak_flops_bf16", c.device.peak_flops_bf16},
                  {"peak_flops_fp8", c.device.peak_flops_fp8},
                  {"peak_flops_int8", c.device.peak_flops_int8},
                  {"sync_skew", c.sync_skew}};
  j["workload"] = {{"context", w.context},
                   {"concurrency", w.concurrency},
                   {"weights", weight_precision_name(w.weights)},
                   {"kv_dtype", kv_precision_name(w.kv)},
                   {"objective", objective_name(w.objective)},
                   {"redundant_experts", w.redundant_experts},
                   {"reserve_fraction", w.reserve_fraction},
                   {"allow_cross_node_tp", w.allow_cross_node_tp}};
  j["fits"] = !r.feasible.empty();
  j["counts"] = {{"costed", r.n_costed},
                 {"feasible", r.feasible.size()},
                 {"over_memory", r.over_memory.size()},
                 {"structural", r.n_structural}};
  json plans = json::array();
  const size_t n = std::min(r.feasible.size(), static_cast<size_t>(std::max(1, in.top)));
  for (size_t i = 0; i < n; ++i) plans.push_back(candidate_json(r.feasible[i], in));
  j["plans"] = plans;
  j["smallest_unit"] = r.smallest_unit ? candidate_json(*r.smallest_unit, in) : json(nullptr);
  if (r.smallest_cluster) {
    j["smallest_cluster"] = {{"name", r.smallest_cluster->name},
                             {"nodes", r.smallest_cluster->nodes},
                             {"devices", r.smallest_cluster->total_devices()},
                             {"unit", candidate_json(*r.smallest_cluster_unit, in)}};
  } else {
    j["smallest_cluster"] = nullptr;
  }
  if (in.explain) {
    json rejected = json::array();
    const size_t k = std::min(r.over_memory.size(), static_cast<size_t>(in.explain_limit));
    for (size_t i = 0; i < k; ++i) rejected.push_back(candidate_json(r.over_memory[i], in));
    for (const auto& s : r.structural) {
      rejected.push_back(
          {{"tp", s.par.tp}, {"pp", s.par.pp}, {"dp", s.par.dp}, {"ep", s.par.ep}, {"reason", s.reason}});
    }
    j["rejected"] = rejected;
  }
  j["estimate_caveats"] = estimate_caveats();
  return j;
}

}  // namespace day0::plan
