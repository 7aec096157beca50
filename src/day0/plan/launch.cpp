#include "day0/plan/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace day0::plan {
namespace {

// The Kubernetes extended resource of a device, by its name ("" for a CPU: no device resource).
std::string device_resource(const DeviceSpec& d) {
  std::string n = d.name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::toupper(c); });
  if (n.find("CPU") != std::string::npos) return "";
  if (n.rfind("MI", 0) == 0) return "amd.com/gpu";
  if (n.find("910") != std::string::npos) return "huawei.com/Ascend910";
  return "nvidia.com/gpu";
}

bool dns_label(const std::string& s) {
  if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
  return std::all_of(s.begin(), s.end(),
                     [](unsigned char c) { return std::islower(c) || std::isdigit(c) || c == '-'; });
}

// The folder's last component (the name itself for a catalog name, "m" for "/data/m/").
std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Ranks a node holds: every device of a node, or all ranks when they fit one node.
int64_t ranks_per_node(const RuntimeLayout& l, const ClusterSpec& c) {
  return std::min<int64_t>(l.world(), c.devices_per_node);
}

int64_t nodes_for(const RuntimeLayout& l, const ClusterSpec& c) {
  const int64_t g = ranks_per_node(l, c);
  return (l.world() + g - 1) / g;
}

}  // namespace

Result<Launcher> parse_launcher(const std::string& name) {
  if (name == "mpirun") return Launcher::kMpirun;
  if (name == "slurm") return Launcher::kSlurm;
  return invalid_argument(fmt::format("--launch {:?}: expected mpirun or slurm", name));
}

RuntimeLayout runtime_layout(const Parallelism& par) {
  RuntimeLayout l;
  l.pp = par.pp;
  if (par.ep == 1 && par.dp == 1) {
    l.tp = par.tp;
  } else if (par.ep == par.dp) {
    // Attention's DP replicas are the EP ranks; each expert's width is split over TP, as the plan's
    // expert-TP = TP x DP / EP = TP says. With TP 1 each EP rank runs its own sequences' attention
    // (--dp-attention); with TP above 1 the runtime replicates attention over the EP ranks instead.
    l.tp = par.tp;
    l.ep = par.ep;
    if (par.tp == 1 && par.pp == 1 && par.dp > 1) l.dp_attention = par.dp;
  } else {
    l.tp = par.tp;
    l.ep = par.ep;
    l.not_runnable = fmt::format(
        "DP-attention {} with EP {}: Day0 runs attention data parallelism with DP = EP only (data-parallel "
        "at TP 1, replicated over the EP ranks above it); other DP layouts not yet",
        par.dp, par.ep);
  }
  return l;
}

std::string serve_command_line(const RuntimeLayout& l, const std::string& model_arg, const Workload& w) {
  std::string line = fmt::format("day0 serve {}", model_arg);
  if (l.tp > 1) line += fmt::format(" --tp {}", l.tp);
  if (l.pp > 1) line += fmt::format(" --pp {}", l.pp);
  if (l.ep > 1) line += fmt::format(" --ep {}", l.ep);
  if (l.dp_attention > 1) line += fmt::format(" --dp-attention {}", l.dp_attention);
  line += fmt::format(" --context {} --max-seqs {}", w.context, w.concurrency);
  if (w.weights != WeightPrecision::kCheckpoint)
    line += fmt::format(" --weights {}", weight_precision_name(w.weights));
  // Copies are spread over EP ranks: without EP the plan places none (the runtime would refuse the flag).
  if (w.redundant_experts > 0 && l.ep > 1)
    line += fmt::format(" --redundant-experts {}", w.redundant_experts);
  if (w.kv != KvPrecision::kBF16) line += fmt::format(" --kv-dtype {}", kv_precision_name(w.kv));
  return line;
}

std::string launch_line(const PlanCandidate& c, const std::string& model_arg, const Workload& w,
                        const ClusterSpec& cluster, Launcher launcher) {
  const RuntimeLayout l = runtime_layout(c.par);
  if (!l.not_runnable.empty()) return "";
  const int64_t g = ranks_per_node(l, cluster), nodes = nodes_for(l, cluster);
  const std::string serve = serve_command_line(l, model_arg, w);
  if (launcher == Launcher::kSlurm) {
    return fmt::format("srun --mpi=pmix --nodes={} --ntasks={} --ntasks-per-node={} {}", nodes, l.world(), g,
                       serve);
  }
  if (l.world() == 1) return serve;  // one process: no launcher
  if (nodes == 1) return fmt::format("mpirun -np {} {}", l.world(), serve);
  return fmt::format("mpirun -np {} --hostfile HOSTS --map-by ppr:{}:node {}", l.world(), g, serve);
}

Result<std::string> k8s_manifests(const PlanCandidate& c, const std::string& model_arg, const Workload& w,
                                  const ClusterSpec& cluster, const K8sOptions& o) {
  const RuntimeLayout l = runtime_layout(c.par);
  if (!l.not_runnable.empty())
    return unsupported("--emit k8s: the plan's layout is not runnable: " + l.not_runnable);
  if (!dns_label(o.name))
    return invalid_argument(
        fmt::format("--k8s-name {:?}: expected a DNS label (a-z, 0-9, '-', at most 63)", o.name));
  if (o.port < 1 || o.port > 65535)
    return invalid_argument(fmt::format("--port {}: expected 1..65535", o.port));
  const int64_t g = ranks_per_node(l, cluster), nodes = nodes_for(l, cluster);
  const std::string model_path = o.model_dir + "/" + base_name(model_arg);
  const std::string serve =
      serve_command_line(l, model_path, w) + fmt::format(" --host 0.0.0.0 --port {}", o.port);
  const std::string resource = device_resource(cluster.device);
  std::string resources;
  if (resource.empty()) {
    resources = fmt::format("          resources:\n            requests:\n              cpu: \"{}\"\n", g);
  } else {
    resources =
        fmt::format("          resources:\n            limits:\n              {}: \"{}\"\n", resource, g);
  }
  const std::string volumes = fmt::format(
      "          volumeMounts:\n"
      "            - {{name: models, mountPath: \"{0}\", readOnly: true}}\n"
      "            - {{name: ssh, mountPath: /etc/day0-ssh, readOnly: true}}\n"
      "        volumes:\n"
      "          - name: models\n"
      "            persistentVolumeClaim: {{claimName: \"{1}\", readOnly: true}}\n"
      "          - name: ssh\n"
      "            secret: {{secretName: \"{2}-ssh\", defaultMode: 0400}}\n",
      o.model_dir, o.model_claim, o.name);
  // Every pod installs the shared key for root and runs sshd on 2222; the leader then lists the group's
  // pods (the leader is worker 0; LWS names worker i "<leader's first label>-i" under the same
  // subdomain) and starts the job with mpirun over ssh.
  const std::string ssh_setup =
      "              mkdir -p /root/.ssh && cp /etc/day0-ssh/id_ed25519 /root/.ssh/ && "
      "cp /etc/day0-ssh/id_ed25519.pub /root/.ssh/authorized_keys && chmod 600 /root/.ssh/*\n"
      "              mkdir -p /run/sshd && /usr/sbin/sshd -p 2222\n";
  // The start of both pods' one container: the image and a shell script (continued by the caller).
  const std::string container = fmt::format(
      "        containers:\n"
      "        - name: day0\n"
      "          image: {}\n"
      "          command: [\"/bin/sh\", \"-c\"]\n"
      "          args:\n"
      "            - |\n"
      "              set -e\n",
      o.image);
  std::string out = fmt::format(
      "# day0 plan --emit k8s: {model} on {cluster}: TP {tp} x PP {pp} x EP {ep} = {world} ranks, {nodes} "
      "node(s) of {g} device(s)\n"
      "# Before applying: put the model folder at {model_path} on the volume claim \"{claim}\", build the\n"
      "# image from the repository's Dockerfile ({image}), and create the group's ssh key:\n"
      "#   ssh-keygen -t ed25519 -N '' -f id_ed25519 && kubectl create secret generic {name}-ssh \\\n"
      "#     --from-file=id_ed25519 --from-file=id_ed25519.pub\n"
      "# Needs the LeaderWorkerSet controller (https://github.com/kubernetes-sigs/lws).\n"
      "apiVersion: leaderworkerset.x-k8s.io/v1\n"
      "kind: LeaderWorkerSet\n"
      "metadata:\n"
      "  name: {name}\n"
      "spec:\n"
      "  replicas: 1\n"
      "  leaderWorkerTemplate:\n"
      "    size: {nodes}\n"
      "    restartPolicy: RecreateGroupOnPodRestart\n"
      "    leaderTemplate:\n"
      "      metadata:\n"
      "        labels:\n"
      "          role: leader\n"
      "      spec:\n"
      "{container}"
      "{ssh_setup}"
      "              first=${{LWS_LEADER_ADDRESS%%.*}}; rest=${{LWS_LEADER_ADDRESS#*.}}\n"
      "              echo \"$LWS_LEADER_ADDRESS slots={g}\" > /tmp/hosts\n"
      "              i=1; while [ $i -lt $LWS_GROUP_SIZE ]; do echo \"$first-$i.$rest slots={g}\" >> "
      "/tmp/hosts; "
      "i=$((i+1)); done\n"
      "              exec mpirun --allow-run-as-root -np {world} --hostfile /tmp/hosts --map-by ppr:{g}:node "
      "--mca plm_rsh_args \"-p 2222 -o StrictHostKeyChecking=no\" {serve}\n"
      "          ports:\n"
      "            - containerPort: {port}\n"
      "          readinessProbe:\n"
      "            httpGet: {{path: /health, port: {port}}}\n"
      "            periodSeconds: 10\n"
      "{resources}"
      "{volumes}"
      "    workerTemplate:\n"
      "      spec:\n"
      "{container}"
      "{ssh_setup_fg}"
      "{resources}"
      "{volumes}"
      "---\n"
      "apiVersion: v1\n"
      "kind: Service\n"
      "metadata:\n"
      "  name: {name}-leader\n"
      "spec:\n"
      "  selector:\n"
      "    leaderworkerset.sigs.k8s.io/name: {name}\n"
      "    role: leader\n"
      "  ports:\n"
      "    - name: http\n"
      "      port: {port}\n"
      "      targetPort: {port}\n",
      fmt::arg("model", model_arg), fmt::arg("cluster", cluster.name), fmt::arg("tp", l.tp),
      fmt::arg("pp", l.pp), fmt::arg("ep", l.ep), fmt::arg("world", l.world()), fmt::arg("nodes", nodes),
      fmt::arg("g", g), fmt::arg("model_path", model_path), fmt::arg("claim", o.model_claim),
      fmt::arg("image", o.image), fmt::arg("name", o.name), fmt::arg("ssh_setup", ssh_setup),
      fmt::arg("ssh_setup_fg", ssh_setup.substr(0, ssh_setup.rfind("/usr/sbin/sshd")) +
                                   "exec /usr/sbin/sshd -D -e -p 2222\n"),
      fmt::arg("serve", serve), fmt::arg("port", o.port), fmt::arg("resources", resources),
      fmt::arg("volumes", volumes), fmt::arg("container", container));
  return out;
}

}  // namespace day0::plan
