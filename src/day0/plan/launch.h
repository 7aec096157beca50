#pragma once
// How a plan is launched with Day0's own runtime: the planner's layout in `day0 serve` flags, as an
// mpirun or srun line, and as Kubernetes manifests (a LeaderWorkerSet group: one pod per node, the
// leader runs mpirun over the group's pods).
//
// The planner's layouts (TP x PP x DP x EP, DP = attention data parallelism of a MoE model, EP carved
// out of each stage's TP x DP devices) map onto the runtime's world of TP x PP x EP ranks, where the
// experts are split over EP and each expert's width over TP, and attention is split over TP and
// replicated over EP. That is the same memory per device exactly when EP = DP (attention's DP
// replicas are the EP ranks) or EP = DP = 1; other layouts have no runtime equivalent yet and carry
// the reason instead of a line.
#include <cstdint>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/plan/cluster.h"
#include "day0/plan/model_cost.h"
#include "day0/plan/planner.h"
#include "day0/plan/workload.h"

namespace day0::plan {

enum class Launcher { kMpirun, kSlurm };
Result<Launcher> parse_launcher(const std::string& name);  // "mpirun", "slurm"

// The runtime's degrees for a planned layout: world = tp x pp x ep ranks.
struct RuntimeLayout {
  int64_t tp = 1, pp = 1, ep = 1;
  // Attention data parallelism (`--dp-attention`, = ep): the plan's DP = EP with TP 1, each EP rank
  // serving its own requests; 1 otherwise (attention replicated over the EP ranks).
  int64_t dp_attention = 1;
  std::string not_runnable;  // why this build cannot run the layout ("" when it can)
  int64_t world() const { return tp * pp * ep; }
};
RuntimeLayout runtime_layout(const Parallelism& par);

// `day0 serve MODEL --tp .. --pp .. --ep .. --context .. --max-seqs ..` (no launcher).
std::string serve_command_line(const RuntimeLayout& layout, const std::string& model_arg, const Workload& w);

// The launch line of a plan: `day0 serve ...` for one device, `mpirun -np N [--hostfile HOSTS
// --map-by ppr:G:node] day0 serve ...`
// (one rank per device, G devices a node), or `srun --mpi=pmix --nodes=K --ntasks=N
// --ntasks-per-node=G day0 serve ...`. Empty when the layout is not runnable (runtime_layout says why).
std::string launch_line(const PlanCandidate& candidate, const std::string& model_arg, const Workload& w,
                        const ClusterSpec& cluster, Launcher launcher = Launcher::kMpirun);

struct K8sOptions {
  std::string name = "day0";                // LeaderWorkerSet and Service name (a DNS label)
  std::string image = "day0:latest";        // built from the repository's Dockerfile
  std::string model_dir = "/models";        // where the model folder is mounted in every pod
  std::string model_claim = "day0-models";  // the PersistentVolumeClaim that holds it
  int port = 8000;
};

// The Kubernetes manifests of a plan (YAML, several documents): a LeaderWorkerSet whose group is one
// pod per node (size = nodes; the leader is worker 0 and runs mpirun over the group's hosts, the
// workers run sshd for mpirun to start their ranks), each pod asking for the node's devices and
// memory, and a Service for the leader's port. Unsupported when the layout is not runnable, or its
// name is not a DNS label.
Result<std::string> k8s_manifests(const PlanCandidate& candidate, const std::string& model_arg,
                                  const Workload& w, const ClusterSpec& cluster, const K8sOptions& options);

}  // namespace day0::plan
