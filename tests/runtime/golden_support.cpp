#include <algorithm>
#include <filesystem>

#include "golden.h"

namespace day0::testing {

std::string golden_dir(const std::string& name) {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

std::vector<std::string> golden_names() {
  std::vector<std::string> out;
  const std::filesystem::path root = std::string(DAY0_TEST_DATA_DIR) + "/golden";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "reference.safetensors") &&
        std::filesystem::exists(entry.path() / "config.json")) {
      out.push_back(entry.path().filename().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
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
