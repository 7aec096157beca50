// Stage: the distributed smoke test. The miniature runs under mpirun in scaled-down layouts of a
// multi-node plan, two ranks each: TP 2, PP 2, and EP 2 for a MoE model, each against the same run in
// one process: the greedy tokens must be identical and the chosen tokens' log-probabilities within
// kLogprobTolerance. A layout the miniature cannot take (its heads do not split, a family not yet
// pipelined) is listed with the reason; the stage is skipped where mpirun is missing.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "day0/dist/communicator.h"
#include "day0/model/catalog.h"
#include "day0/report/adapt_context.h"
#include "day0/report/stages/subprocess.h"
#include "day0/runtime/model_weights.h"
#include "day0/runtime/packed_int_source.h"

namespace day0::report {
namespace {

namespace fs = std::filesystem;

// F32 all-reduces sum in another order than one process: the log-probabilities differ by rounding.
constexpr double kLogprobTolerance = 1e-3;
constexpr double kRunSeconds = 120.0;

struct Layout {
  const char* name;
  std::vector<std::string> flags;
  Status fits;
};

// What one `day0 run --json` printed, or why it did not.
struct RunOutput {
  nlohmann::json json;
  std::string error;
};

RunOutput run_json(const std::vector<std::string>& argv, const fs::path& work, const std::string& name,
                   const std::vector<std::string>& env) {
  const fs::path out = work / (name + ".json"), err = work / (name + ".log");
  std::error_code ec;
  fs::remove(out, ec);
  fs::remove(err, ec);
  const Finished f = run_bounded(argv, out, err, kRunSeconds, env);
  RunOutput r;
  if (f.timed_out) {
    r.error = fmt::format("timed out after {:.0f} s", kRunSeconds);
  } else if (f.exit_code != 0) {
    r.error = fmt::format("exit {}: {}", f.exit_code, last_line(read_text(err)));
  } else {
    try {
      r.json = nlohmann::json::parse(read_text(out));
    } catch (const nlohmann::json::exception& e) {
      r.error = std::string("its --json output does not parse: ") + e.what();
    }
  }
  return r;
}

std::vector<double> chosen_logprobs(const nlohmann::json& j) {
  std::vector<double> out;
  if (j.contains("logprobs"))
    for (const auto& s : j["logprobs"]) out.push_back(s.value("logprob", NAN));
  return out;
}

}  // namespace

void run_distributed_stage(AdaptContext& ctx, StageResult& out) {
  if (ctx.miniature_dir.empty()) return stage_skip(out, "the miniature stage made no miniature");
  if (!dist::mpi_available()) {
    return stage_skip(out,
                      "this build has no MPI (configure with libopenmpi-dev installed); nothing was run");
  }
  const std::string mpirun = which("mpirun");
  if (mpirun.empty()) return stage_skip(out, "mpirun not found (Debian: openmpi-bin); nothing was run");
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return stage_fail(out, "cannot find this executable (/proc/self/exe): " + ec.message());
  auto resolved = resolve_model(ctx.miniature_dir.string());
  if (!resolved.is_ok()) return stage_fail(out, "reading the miniature: " + resolved.status().to_string());
  const ModelSpec spec = unpacked_spec(resolved->spec);

  std::vector<Layout> layouts = {{"TP 2", {"--tp", "2"}, check_tensor_parallel(spec, 2)},
                                 {"PP 2", {"--pp", "2"}, check_pipeline_parallel(spec, 2)}};
  if (spec.moe) layouts.push_back({"EP 2", {"--ep", "2"}, check_expert_parallel(spec, 2)});

  const fs::path work = ctx.work_dir / "distributed";
  fs::create_directories(work, ec);
  const int new_tokens = static_cast<int>(std::clamp<int64_t>(ctx.options.new_tokens, 1, 16));
  const std::vector<std::string> run = {self.string(),
                                        "run",
                                        ctx.miniature_dir.string(),
                                        "--prompt-ids",
                                        "1,17,42,99,3,250",
                                        "--max-new",
                                        std::to_string(new_tokens),
                                        "--logprobs",
                                        "0",
                                        "--threads",
                                        "1",
                                        "--ignore-eos",
                                        "--json"};
  const RunOutput one = run_json(run, work, "one-process", {});
  if (!one.error.empty()) return stage_fail(out, "the miniature as one process: " + one.error);
  const auto tokens = one.json["tokens"];
  const std::vector<double> logprobs = chosen_logprobs(one.json);

  // Open MPI refuses root without these; shared memory between ranks of this one machine; its session
  // folder (which mpirun leaves in TMPDIR when it is killed) inside this run's scratch, which adapt
  // removes on every exit path.
  const fs::path mpi_tmp = work / "mpi";
  fs::create_directories(mpi_tmp, ec);
  std::vector<std::string> env = {"OMPI_MCA_btl=self,vader", "TMPDIR=" + mpi_tmp.string()};
  if (geteuid() == 0) env.insert(env.end(), {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"});
  nlohmann::json evidence = nlohmann::json::array();
  std::vector<std::string> passed, failed, skipped;
  for (const Layout& l : layouts) {
    nlohmann::json e = {{"layout", l.name}};
    if (!l.fits.is_ok()) {
      e["skipped"] = l.fits.to_string();
      skipped.push_back(fmt::format("{} ({})", l.name, l.fits.message()));
      evidence.push_back(e);
      continue;
    }
    std::vector<std::string> argv = {mpirun, "--oversubscribe", "-np", "2"};
    argv.insert(argv.end(), run.begin(), run.end());
    argv.insert(argv.end(), l.flags.begin(), l.flags.end());
    const RunOutput two = run_json(argv, work, l.flags[0].substr(2) + "-2", env);
    if (!two.error.empty()) {
      e["error"] = two.error;
      failed.push_back(fmt::format("{}: {}", l.name, two.error));
      evidence.push_back(e);
      continue;
    }
    const std::vector<double> lp = chosen_logprobs(two.json);
    double max_diff = lp.size() == logprobs.size() ? 0.0 : INFINITY;
    for (size_t i = 0; i < lp.size() && i < logprobs.size(); ++i)
      max_diff = std::max(max_diff, std::fabs(lp[i] - logprobs[i]));
    const bool same_tokens = two.json["tokens"] == tokens;
    e["same_tokens"] = same_tokens;
    e["tokens"] = two.json["tokens"].size();
    e["max_abs_logprob_diff"] = std::isfinite(max_diff) ? nlohmann::json(max_diff) : nlohmann::json(nullptr);
    if (two.json.contains("parallel")) e["parallel"] = two.json["parallel"];
    evidence.push_back(e);
    if (!same_tokens || !(max_diff <= kLogprobTolerance)) {
      failed.push_back(fmt::format("{}: {}, max |Δ logprob| {:.3g} (tolerance {:.0e})", l.name,
                                   same_tokens ? "same tokens" : "tokens differ", max_diff,
                                   kLogprobTolerance));
    } else {
      passed.push_back(
          fmt::format("{} ({} tokens identical, max |Δ logprob| {:.2g})", l.name, tokens.size(), max_diff));
    }
  }
  out.evidence = {{"mpirun", mpirun}, {"ranks", 2}, {"layouts", evidence}, {"tolerance", kLogprobTolerance}};
  const std::string not_run =
      skipped.empty() ? "" : "; not run: " + fmt::format("{}", fmt::join(skipped, ", "));
  if (!failed.empty()) return stage_fail(out, fmt::format("{}{}", fmt::join(failed, "; "), not_run));
  if (passed.empty()) return stage_skip(out, "no scaled-down layout fits the miniature" + not_run);
  stage_pass(out, fmt::format("miniature under mpirun, 2 ranks each, against one process: {}{}",
                              fmt::join(passed, ", "), not_run));
}

}  // namespace day0::report
