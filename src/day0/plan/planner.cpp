#include "day0/plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "day0/core/human.h"

namespace day0::plan {

namespace {

constexpr int kExamplesPerReason = 3;

bool tiles_node(int64_t group, int64_t per_node) {
  return per_node % group == 0 || group % per_node == 0;
}

// Collects structural rejections: counts all, keeps a few examples of each kind of reason.
class Rejections {
 public:
  explicit Rejections(PlanResult& out) : out_(out) {}
  void add(const Parallelism& par, const std::string& kind, std::string reason) {
    ++out_.n_structural;
    int& seen = per_kind_[kind];
    if (seen++ < kExamplesPerReason) out_.structural.push_back({par, std::move(reason)});
  }

 private:
  PlanResult& out_;
  std::map<std::string, int> per_kind_;
};

// Why a TP degree cannot split the model's heads and widths ("" when it can).
std::string tp_divisibility(const ModelCost& m, int64_t tp) {
  if (m.n_heads % tp != 0) return fmt::format("{} attention heads do not divide by TP {}", m.n_heads, tp);
  if (!m.mla && m.n_kv_heads > 0 && m.n_kv_heads % tp != 0 && tp % m.n_kv_heads != 0) {
    return fmt::format("{} kv heads neither divide by TP {} nor divide it", m.n_kv_heads, tp);
  }
  if (m.dense_intermediate > 0 && m.dense_intermediate % tp != 0) {
    return fmt::format("dense MLP width {} does not divide by TP {}", m.dense_intermediate, tp);
  }
  if (m.shared_intermediate > 0 && m.shared_intermediate % tp != 0) {
    return fmt::format("shared expert width {} does not divide by TP {}", m.shared_intermediate, tp);
  }
  if (m.out_groups > 0) return output_groups_split_problem(m.out_groups, tp);
  return {};
}

bool better(const PlanCandidate& a, const PlanCandidate& b, Objective objective) {
  auto tie = [&]() {
    if (a.par.devices() != b.par.devices()) return a.par.devices() < b.par.devices();
    if (a.time.tpot != b.time.tpot) return a.time.tpot < b.time.tpot;
    return a.memory.total < b.memory.total;
  };
  switch (objective) {
    case Objective::kMinLatency:
      if (a.time.tpot != b.time.tpot) return a.time.tpot < b.time.tpot;
      if (a.time.ttft != b.time.ttft) return a.time.ttft < b.time.ttft;
      return tie();
    case Objective::kMaxThroughputPerDevice:
      if (a.time.tokens_per_s_per_device != b.time.tokens_per_s_per_device) {
        return a.time.tokens_per_s_per_device > b.time.tokens_per_s_per_device;
      }
      return tie();
    case Objective::kFewestDevices:
      if (a.par.devices() != b.par.devices()) return a.par.devices() < b.par.devices();
      if (a.time.tpot != b.time.tpot) return a.time.tpot < b.time.tpot;
      return a.memory.total < b.memory.total;
  }
  return tie();
}

// Enumerates every layout of `model` on `cluster`; `visit(candidate)` gets each costed layout and returns
// false to stop early.
template <typename Visit>
void enumerate(const PreparedModel& prepared, const ClusterSpec& cluster, const Workload& w,
               Rejections* rejections, Visit&& visit) {
  const ModelCost& m = *prepared.model;
  const int64_t total = cluster.total_devices();
  const int64_t per_node = cluster.devices_per_node;
  const int64_t n_layers = m.n_layers();
  const int64_t physical_experts = m.n_experts + (m.n_experts > 0 ? w.redundant_experts : 0);
  const int64_t max_tp = w.allow_cross_node_tp ? total : per_node;
  for (int64_t tp = 1; tp <= std::min(total, std::max(max_tp, per_node * 2)); ++tp) {
    if (w.tp > 0 && tp != w.tp) continue;
    if (!tiles_node(tp, per_node)) continue;
    if (tp > max_tp) {
      if (rejections) {
        rejections->add(
            {tp, 1, 1, 1}, "cross-node-tp",
            fmt::format("TP {} spans nodes of {} devices (allow with --allow-cross-node-tp)", tp, per_node));
      }
      continue;
    }
    if (std::string why = tp_divisibility(m, tp); !why.empty()) {
      if (rejections) rejections->add({tp, 1, 1, 1}, "tp-divisibility", why);
      continue;
    }
    for (int64_t pp = 1; pp <= n_layers && tp * pp <= total; ++pp) {
      if (!w.allow_uneven_pp && n_layers % pp != 0) {
        if (rejections) {
          rejections->add({tp, pp, 1, 1}, "pp-divisibility",
                          fmt::format("{} layers do not divide into {} equal stages", n_layers, pp));
        }
        continue;
      }
      const int64_t max_dp = m.n_experts > 0 ? total / (tp * pp) : 1;
      for (int64_t dp = 1; dp <= max_dp; ++dp) {
        const int64_t stage = tp * dp;
        if (!tiles_node(stage, per_node)) continue;  // a stage must fill whole nodes or share one evenly
        for (int64_t ep = 1; ep <= stage; ++ep) {
          if (stage % ep != 0) continue;
          const Parallelism par{tp, pp, dp, ep};
          if (m.n_experts == 0) {
            if (ep > 1) break;
          } else {
            if (physical_experts % ep != 0) {
              if (rejections) {
                rejections->add(par, "ep-divisibility",
                                fmt::format("{} experts{} do not divide over EP {}", physical_experts,
                                            w.redundant_experts > 0 ? " (with redundant copies)" : "", ep));
              }
              continue;
            }
            if (m.expert_intermediate % par.expert_tp() != 0) {
              if (rejections) {
                rejections->add(
                    par, "expert-tp-divisibility",
                    fmt::format("expert width {} does not divide by expert-TP {} (= TP x DP / EP)",
                                m.expert_intermediate, par.expert_tp()));
              }
              continue;
            }
          }
          PlanCandidate c;
          c.par = par;
          c.memory = estimate_memory(prepared, cluster, w, par);
          c.feasible = c.memory.total <= c.memory.capacity;
          if (!visit(c)) return;
        }
      }
    }
  }
}

// Whether some layout fits on `cluster`, and the one with the fewest devices (the fastest of those).
std::optional<PlanCandidate> smallest_feasible(const PreparedModel& prepared, const ClusterSpec& cluster,
                                               const Workload& w) {
  std::optional<PlanCandidate> best;
  enumerate(prepared, cluster, w, nullptr, [&](PlanCandidate& c) {
    if (!c.feasible || (best && c.par.devices() > best->par.devices())) return true;
    c.time = estimate_time(prepared, cluster, w, c.par);
    if (!best || better(c, *best, Objective::kFewestDevices)) best = c;
    return true;
  });
  return best;
}

}  // namespace

Result<PlanResult> plan_model(const ModelCost& model, const ClusterSpec& cluster, const Workload& workload,
                              const PlanOptions& options) {
  D0_RETURN_IF_ERROR(validate_workload(workload));
  D0_RETURN_IF_ERROR(validate_cluster(cluster).with_context(cluster.name));
  if (model.layers.empty() || model.hidden <= 0 || model.n_heads <= 0) {
    return invalid_argument(fmt::format("model '{}': no layers, hidden size or heads to plan", model.name));
  }
  if (model.n_experts > 0 && (model.experts_per_token <= 0 || model.expert_intermediate <= 0)) {
    return invalid_argument(fmt::format("model '{}': experts without top-k or width", model.name));
  }
  if (workload.tp > 0) {
    if (std::string why = tp_divisibility(model, workload.tp); !why.empty()) {
      return invalid_argument(fmt::format("--tp {}: model '{}': {}", workload.tp, model.name, why));
    }
  }
  const PreparedModel prepared = prepare_model(model, workload, cluster.device);
  PlanResult out;
  Rejections rejections(out);
  enumerate(prepared, cluster, workload, &rejections, [&](PlanCandidate& c) {
    ++out.n_costed;
    if (c.feasible) {
      c.time = estimate_time(prepared, cluster, workload, c.par);
      out.feasible.push_back(c);
    } else {
      out.over_memory.push_back(c);
    }
    return true;
  });
  std::sort(out.feasible.begin(), out.feasible.end(),
            [&](const PlanCandidate& a, const PlanCandidate& b) { return better(a, b, workload.objective); });
  std::sort(out.over_memory.begin(), out.over_memory.end(),
            [](const PlanCandidate& a, const PlanCandidate& b) {
              const double oa = a.memory.total - a.memory.capacity;
              const double ob = b.memory.total - b.memory.capacity;
              if (oa != ob) return oa < ob;
              return a.par.devices() < b.par.devices();
            });
  for (const auto& c : out.feasible) {
    if (!out.smallest_unit || better(c, *out.smallest_unit, Objective::kFewestDevices)) out.smallest_unit = c;
  }
  if (out.feasible.empty() && options.grow_when_infeasible) {
    // Feasibility only grows with nodes (every layout of n nodes is a layout of n + 1), so double, then
    // bisect.
    int64_t lo = cluster.nodes;  // known infeasible
    int64_t hi = 0;
    std::optional<PlanCandidate> found;
    for (int64_t n = std::max<int64_t>(1, cluster.nodes) * 2; n <= options.max_grow_nodes * 2; n *= 2) {
      const int64_t probe = std::min(n, options.max_grow_nodes);
      if (probe <= lo) break;
      if (auto unit = smallest_feasible(prepared, with_nodes(cluster, probe), workload)) {
        hi = probe;
        found = unit;
        break;
      }
      lo = probe;
      if (probe == options.max_grow_nodes) break;
    }
    while (hi > 0 && hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (auto unit = smallest_feasible(prepared, with_nodes(cluster, mid), workload)) {
        hi = mid;
        found = unit;
      } else {
        lo = mid;
      }
    }
    if (hi > 0) {
      out.smallest_cluster = with_nodes(cluster, hi);
      out.smallest_cluster_unit = found;
    }
  }
  return out;
}

std::string over_memory_reason(const PlanCandidate& c, const Workload& w) {
  const MemoryEstimate& m = c.memory;
  int largest = 0;
  for (int i = 1; i < kMemoryItems; ++i) {
    if (m.items[i] > m.items[largest]) largest = i;
  }
  std::string reason =
      fmt::format("needs {} a device (stage {}), has {}: over by {}; largest item {} {}",
                  human_bytes(m.total), m.stage, human_bytes(m.capacity), human_bytes(m.total - m.capacity),
                  memory_item_name(static_cast<MemoryItem>(largest)), human_bytes(m.items[largest]));
  const double kv = m.item(MemoryItem::kKvCache);
  if (m.kv_free_bytes > 0 && kv > m.kv_free_bytes) {
    reason += fmt::format("; KV cache for {} x {} tokens per replica needs {}, {} left after weights",
                          (w.concurrency + c.par.dp - 1) / c.par.dp, w.context, human_bytes(kv),
                          human_bytes(m.kv_free_bytes));
  } else if (m.kv_free_bytes <= 0) {
    reason += "; weights and activations alone do not fit";
  }
  return reason;
}

}  // namespace day0::plan
