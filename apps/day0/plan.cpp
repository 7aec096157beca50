// day0 plan MODEL --cluster FILE|PRESET: which TP x PP x DP x EP layouts fit, with how much KV room,
// and how fast they should be. All logic lives in src/day0/plan; this file parses flags and prints.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "day0/core/atomic_file.h"
#include "day0/core/human.h"
#include "day0/plan/launch.h"
#include "day0/plan/model_cost_adapter.h"
#include "day0/plan/plan_report.h"
#include "day0/plan/planner.h"
#include "day0/plan/presets.h"

namespace day0::cli {
namespace {

struct PlanArgs {
  std::string model;
  std::string cluster;
  std::vector<int64_t> contexts{8192};
  std::vector<int64_t> concurrencies{16};
  std::string weights = "checkpoint";
  std::string kv = "bf16";
  std::string objective = "min-latency";
  int top = 5;
  bool explain = false;
  bool json = false;
  bool allow_cross_node_tp = false;
  bool even_pp = false;
  int64_t tp = 0;
  int64_t redundant_experts = 0;
  int64_t prefill_chunk = 8192;
  double reserve = 0.10;
  std::string launch = "mpirun";
  std::string emit;  // "k8s": Kubernetes manifests of the best plan
  std::string out;   // where --emit writes ("" or "-": stdout)
  plan::K8sOptions k8s;
};

Result<plan::Workload> make_workload(const PlanArgs& a) {
  plan::Workload w;
  D0_ASSIGN_OR_RETURN(w.weights, plan::parse_weight_precision(a.weights));
  D0_ASSIGN_OR_RETURN(w.kv, plan::parse_kv_precision(a.kv));
  D0_ASSIGN_OR_RETURN(w.objective, plan::parse_objective(a.objective));
  w.allow_cross_node_tp = a.allow_cross_node_tp;
  w.allow_uneven_pp = !a.even_pp;
  w.redundant_experts = a.redundant_experts;
  w.tp = a.tp;
  w.prefill_chunk = a.prefill_chunk;
  w.reserve_fraction = a.reserve;
  w.context = a.contexts.front();
  w.concurrency = a.concurrencies.front();
  D0_RETURN_IF_ERROR(plan::validate_workload(w));
  return w;
}

// One line per (context, concurrency) pair: the best layout, or where it would fit.
int run_what_if(const PlanArgs& a, const plan::ModelCost& model, const plan::ClusterSpec& cluster,
                plan::Workload w) {
  nlohmann::json rows = nlohmann::json::array();
  std::string text = fmt::format("what-if for {} on {} ({}):\n", model.name, cluster.name,
                                 plan::objective_name(w.objective));
  text += fmt::format("  {:>9} {:>11}  {:<28} {:>7} {:>10} {:>10} {:>11}  {}\n", "context", "concurrency",
                      "best layout", "devices", "TTFT", "TPOT", "tokens/s", "smallest unit");
  bool all_fit = true;
  for (int64_t context : a.contexts) {
    for (int64_t concurrency : a.concurrencies) {
      w.context = context;
      w.concurrency = concurrency;
      if (Status st = plan::validate_workload(w); !st.is_ok()) return report_error("plan", st);
      auto result = plan::plan_model(model, cluster, w);
      if (!result) return report_error("plan", result.status());
      const plan::PlanResult& r = *result;
      nlohmann::json row = {
          {"context", context}, {"concurrency", concurrency}, {"fits", !r.feasible.empty()}};
      if (r.feasible.empty()) {
        all_fit = false;
        const std::string where =
            r.smallest_cluster ? "needs " + r.smallest_cluster->name : "fits no searched cluster";
        text += fmt::format("  {:>9} {:>11}  {:<28} {:>7} {:>10} {:>10} {:>11}  {}\n", with_commas(context),
                            with_commas(concurrency), "does not fit", "-", "-", "-", "-", where);
        if (r.smallest_cluster) row["smallest_cluster"] = r.smallest_cluster->name;
      } else {
        const plan::PlanCandidate& best = r.feasible.front();
        const std::string layout =
            fmt::format("TP{} PP{} DP{} EP{}", best.par.tp, best.par.pp, best.par.dp, best.par.ep);
        text += fmt::format("  {:>9} {:>11}  {:<28} {:>7} {:>10} {:>10} {:>11}  {} devices\n",
                            with_commas(context), with_commas(concurrency), layout, best.par.devices(),
                            human_seconds(best.time.ttft), human_seconds(best.time.tpot),
                            with_commas(static_cast<int64_t>(best.time.tokens_per_s)),
                            r.smallest_unit->par.devices());
        row["best"] = {{"tp", best.par.tp},
                       {"pp", best.par.pp},
                       {"dp", best.par.dp},
                       {"ep", best.par.ep},
                       {"devices", best.par.devices()},
                       {"ttft_s", best.time.ttft},
                       {"tpot_s", best.time.tpot},
                       {"tokens_per_s", best.time.tokens_per_s}};
        row["smallest_unit_devices"] = r.smallest_unit->par.devices();
      }
      rows.push_back(row);
    }
  }
  if (a.json) {
    nlohmann::json j = {{"model", model.name},
                        {"cluster", cluster.name},
                        {"what_if", rows},
                        {"estimate_caveats", plan::estimate_caveats()}};
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{}", text);
    for (const auto& caveat : plan::estimate_caveats()) fmt::print("note: {}\n", caveat);
  }
  return all_fit ? kExitOk : kExitBadInput;
}

// --emit k8s: the best plan's manifests, to --out or stdout.
int emit_manifests(const PlanArgs& a, const plan::PlanReportInput& in) {
  if (in.result->feasible.empty()) {
    return report_error("plan", failed_precondition(fmt::format("--emit {}: {} fits no layout of {}", a.emit,
                                                                in.model->name, in.cluster->name)));
  }
  // The best plan Day0 can run.
  const plan::PlanCandidate* best = nullptr;
  for (const plan::PlanCandidate& c : in.result->feasible) {
    if (plan::runtime_layout(c.par).not_runnable.empty()) {
      best = &c;
      break;
    }
  }
  if (best == nullptr) {
    return report_error(
        "plan",
        unsupported(fmt::format("--emit {}: no layout that fits is runnable by day0 yet "
                                "(the best: {})",
                                a.emit, plan::runtime_layout(in.result->feasible.front().par).not_runnable)));
  }
  auto yaml = plan::k8s_manifests(*best, a.model, *in.workload, *in.cluster, a.k8s);
  if (!yaml) return report_error("plan", yaml.status());
  if (a.out.empty() || a.out == "-") {
    fmt::print("{}", *yaml);
    return kExitOk;
  }
  if (Status st = write_file_atomic(a.out, *yaml); !st.is_ok()) return report_error("plan", st);
  fmt::print(stderr, "plan: wrote {} ({}; apply with kubectl apply -f {})\n", a.out,
             plan::launch_line(*best, a.model, *in.workload, *in.cluster), a.out);
  return kExitOk;
}

int run_plan(const PlanArgs& a) {
  auto workload = make_workload(a);
  if (!workload) return report_error("plan", workload.status());
  if (a.top < 1) return report_error("plan", invalid_argument("--top: expected at least 1"));
  auto cluster = plan::resolve_cluster(a.cluster);
  if (!cluster) return report_error("plan", cluster.status());
  auto model = plan::load_model_cost(a.model);
  if (!model) return report_error("plan", model.status());
  for (const int64_t context : a.contexts) {
    if (model->max_context > 0 && context > model->max_context) {
      fmt::print(stderr,
                 "day0 plan: warning: --context {} is beyond the model's context of {} tokens "
                 "(max_position_embeddings); the plan sizes a KV cache the model cannot use\n",
                 context, model->max_context);
    }
  }
  if (a.contexts.size() > 1 || a.concurrencies.size() > 1) return run_what_if(a, *model, *cluster, *workload);

  auto result = plan::plan_model(*model, *cluster, *workload);
  if (!result) return report_error("plan", result.status());
  plan::PlanReportInput in;
  in.model = &*model;
  in.cluster = &*cluster;
  in.workload = &*workload;
  in.result = &*result;
  in.model_arg = a.model;
  in.top = a.top;
  in.explain = a.explain;
  auto launcher = plan::parse_launcher(a.launch);
  if (!launcher) return report_error("plan", launcher.status());
  in.launcher = *launcher;
  if (!a.emit.empty()) return emit_manifests(a, in);
  if (a.json) {
    fmt::print("{}\n", plan::plan_to_json(in).dump(2));
  } else {
    fmt::print("{}", plan::format_plan_text(in));
  }
  if (result->feasible.empty()) {
    std::string where =
        result->smallest_cluster
            ? fmt::format("the smallest cluster of {} that holds it is {} ({} devices)", cluster->device.name,
                          result->smallest_cluster->name, result->smallest_cluster->total_devices())
            : fmt::format("no cluster of {} up to the searched size holds it", cluster->device.name);
    fmt::print(stderr, "day0 plan: error: {} does not fit on {} (context {}, concurrency {}): {}\n",
               model->name, cluster->name, workload->context, workload->concurrency, where);
    return kExitBadInput;
  }
  return kExitOk;
}

const Registrar kPlanCommand{
    "plan", "Parallel planner: which TP x PP x DP x EP layouts fit a cluster, KV room, TTFT/TPOT estimates",
    60, [](CLI::App& sub) -> CommandRunner {
      auto a = std::make_shared<PlanArgs>();
      sub.add_option("model", a->model, "Model: a folder with config.json, a config.json, or a catalog name")
          ->required();
      sub.add_option("--cluster", a->cluster,
                     "Cluster JSON file, or a preset: 8xH200, 8xB200, 8xH100, 8xH800, 8xA100-80G, 8xMI300X, "
                     "8x910B, 1xCPU (NxMxDEVICE multiplies nodes, e.g. 2x8xH200), local")
          ->required();
      sub.add_option("--context", a->contexts,
                     "Tokens per sequence; several (comma-separated) for a what-if table")
          ->delimiter(',')
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
      sub.add_option("--concurrency", a->concurrencies,
                     "Sequences served together; several for a what-if table")
          ->delimiter(',')
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
      sub.add_option("--weights", a->weights, "Weight precision: checkpoint, bf16, fp8, int8, int4")
          ->capture_default_str();
      sub.add_option("--kv-dtype", a->kv, "KV cache element type: f32, bf16, fp8 (as run --kv-dtype)")
          ->capture_default_str();
      sub.add_option("--objective", a->objective, "min-latency, max-throughput-per-device, fewest-devices")
          ->capture_default_str();
      sub.add_option("--top", a->top, "How many plans to print")
          ->capture_default_str()
          ->check(CLI::Range(1, 1000));
      sub.add_flag("--explain", a->explain, "Also list rejected layouts with the reason");
      sub.add_flag("--json", a->json, "Print JSON instead of tables");
      sub.add_flag("--allow-cross-node-tp", a->allow_cross_node_tp, "Let tensor parallelism span nodes");
      sub.add_flag("--even-pp", a->even_pp, "Require the layer count to divide by PP");
      sub.add_option("--tp", a->tp,
                     "Only layouts of this tensor-parallel degree (refused when it cannot split the model)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
      sub.add_option("--redundant-experts", a->redundant_experts,
                     "Extra physical expert copies in all (load balancing), spread over the EP ranks")
          ->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
      sub.add_option("--prefill-chunk", a->prefill_chunk, "Tokens per prefill step")
          ->capture_default_str()
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
      sub.add_option("--reserve", a->reserve, "Fraction of device memory kept back (runtime, fragmentation)")
          ->capture_default_str()
          ->check(finite_number(0.0, 0.95, "--reserve (the share of device memory kept back)"));
      sub.add_option(
             "--launch", a->launch,
             "How the launch lines start the job: mpirun (default; --hostfile HOSTS beyond one node) or "
             "slurm (srun)")
          ->check(CLI::IsMember({"mpirun", "slurm"}));
      sub.add_option(
             "--emit", a->emit,
             "k8s: write Kubernetes manifests of the best runnable plan (a LeaderWorkerSet, one pod a "
             "node, and the leader's Service) instead of the tables")
          ->check(CLI::IsMember({"k8s"}));
      sub.add_option("--out", a->out, "Where --emit writes (default: standard output)");
      sub.add_option("--image", a->k8s.image, "--emit k8s: the container image (built from the Dockerfile)")
          ->capture_default_str();
      sub.add_option("--k8s-name", a->k8s.name, "--emit k8s: the LeaderWorkerSet's name")
          ->capture_default_str();
      sub.add_option("--model-dir", a->k8s.model_dir, "--emit k8s: where the model volume is mounted")
          ->capture_default_str();
      sub.add_option("--model-claim", a->k8s.model_claim,
                     "--emit k8s: the PersistentVolumeClaim of the models")
          ->capture_default_str();
      sub.add_option("--port", a->k8s.port, "--emit k8s: the server's port")
          ->capture_default_str()
          ->check(CLI::Range(1, 65535));
      return [a]() { return run_plan(*a); };
    }};

}  // namespace
}  // namespace day0::cli
