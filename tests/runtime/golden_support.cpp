#include <algorithm>
#include <filesystem>

#include "day0/model/config_parser.h"
#include "golden.h"

namespace day0::testing {

std::string golden_dir(const std::string& name) {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

namespace {

// Golden folders holding a model and a reference dump, sorted; `runnable`: those the engine runs (true)
// or those whose mechanisms it does not run yet (false).
std::vector<std::string> goldens(bool runnable) {
  std::vector<std::string> out;
  const std::filesystem::path root = std::string(DAY0_TEST_DATA_DIR) + "/golden";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "reference.safetensors") &&
        std::filesystem::exists(entry.path() / "config.json")) {
      auto spec = load_model_config(entry.path() / "config.json");
      if ((!spec.is_ok() || unimplemented_mechanisms(*spec).empty()) == runnable) {
        out.push_back(entry.path().filename().string());
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> golden_names() {
  return goldens(true);
}

std::vector<std::string> pending_golden_names() {
  return goldens(false);
}

Result<GoldenRun> open_golden(const std::string& name, const std::string& backend, EngineOptions options) {
  GoldenRun run;
  D0_ASSIGN_OR_RETURN(run.model, load_model(golden_dir(name)));
  D0_ASSIGN_OR_RETURN(run.reference, read_reference_dump(golden_dir(name) + "/reference.safetensors"));
  BackendOptions bo;
  bo.n_threads = 2;
  D0_ASSIGN_OR_RETURN(run.backend, open_backend(backend, bo));
  D0_ASSIGN_OR_RETURN(run.engine, Engine::create(run.model.spec, run.model.weights, *run.backend, options));
  return run;
}

}  // namespace day0::testing
