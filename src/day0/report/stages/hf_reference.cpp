#include "day0/report/stages/hf_reference.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "day0/report/stages/subprocess.h"

namespace day0::report {

namespace {

namespace fs = std::filesystem;

fs::path find_script() {
  if (const char* env = std::getenv("DAY0_REFERENCE_TOOLS")) {
    const fs::path p = fs::path(env) / "dump_reference.py";
    if (fs::is_regular_file(p)) return p;
  }
#ifdef DAY0_SOURCE_DIR
  const fs::path p = fs::path(DAY0_SOURCE_DIR) / "tools/reference/dump_reference.py";
  if (fs::is_regular_file(p)) return p;
#endif
  return {};
}

// Whether `python` imports torch and transformers; their versions in `versions` when it does.
bool probe(const std::string& python, const fs::path& work_dir, std::string& versions, std::string& why) {
  if (access(python.c_str(), X_OK) != 0) {
    why = python + " is not an executable file";
    return false;
  }
  const fs::path log = work_dir / "hf-probe.log";
  std::error_code ec;
  fs::remove(log, ec);
  const Finished f =
      run_bounded({python, "-c",
                   "import torch, transformers; print('torch', torch.__version__ + ', transformers', "
                   "transformers.__version__)"},
                  log, log, 120.0, {"HF_HUB_OFFLINE=1"});
  const std::string text = read_text(log);
  if (f.timed_out || f.exit_code != 0) {
    why = fmt::format("{} cannot import torch + transformers ({})", python,
                      f.timed_out ? std::string("timed out after 120 s") : last_line(text));
    return false;
  }
  versions = last_line(text);
  return true;
}

}  // namespace

HfReferenceRun dump_with_transformers(const std::string& requested, const fs::path& model_dir,
                                      const fs::path& work_dir, uint64_t seed, double timeout_seconds) {
  HfReferenceRun r;
  if (requested == "none") {
    r.reason = "turned off (--reference-python none)";
    return r;
  }
  const fs::path script = find_script();
  if (script.empty()) {
    r.reason = "tools/reference/dump_reference.py not found (set DAY0_REFERENCE_TOOLS to its folder)";
    r.failed = !requested.empty();
    return r;
  }
  std::vector<std::string> candidates;
  if (!requested.empty()) {
    candidates.push_back(requested);
  } else {
    if (const char* env = std::getenv("DAY0_REFERENCE_PYTHON"); env != nullptr && *env != '\0')
      candidates.emplace_back(env);
    if (access("/opt/refvenv/bin/python", X_OK) == 0) candidates.emplace_back("/opt/refvenv/bin/python");
    if (const std::string p = which("python3"); !p.empty()) candidates.push_back(p);
  }
  std::vector<std::string> whys;
  for (const std::string& python : candidates) {
    std::string why;
    if (probe(python, work_dir, r.versions, why)) {
      r.python = python;
      break;
    }
    whys.push_back(why);
  }
  if (r.python.empty()) {
    r.reason = candidates.empty() ? std::string("no Python found (python3 is not on PATH)")
                                  : fmt::format("no usable Python: {}", fmt::join(whys, "; "));
    r.failed = !requested.empty();  // asked for by path: its failure is the stage's
    return r;
  }
  r.attempted = true;
  const fs::path dump = work_dir / "miniature-transformers.safetensors";
  const fs::path log = work_dir / "hf-reference.log";
  const Finished f = run_bounded(
      {
          r.python,
          script.string(),
          "dump",
          model_dir.string(),
          "--out",
          dump.string(),
          "--random-lengths",
          "7",
          "23",
          "--seed",
          std::to_string(seed),
          "--greedy",
          "4",
      },
      log, log, timeout_seconds, {"HF_HUB_OFFLINE=1"});
  if (f.timed_out || f.exit_code != 0 || !fs::is_regular_file(dump)) {
    r.failed = true;
    r.reason = fmt::format("{} {} dump failed ({}): {}", r.python, script.string(),
                           f.timed_out ? fmt::format("timed out after {:.0f} s", timeout_seconds)
                                       : fmt::format("exit {}", f.exit_code),
                           last_line(read_text(log)));
    return r;
  }
  r.dump_path = dump.string();
  return r;
}

}  // namespace day0::report
