#include "model_test_support.h"

namespace day0::testing {

std::filesystem::path shared_configs_dir() {
  const std::filesystem::path dir = std::filesystem::path(DAY0_SHARED_DIR) / "configs";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return {};
  return dir;
}

}  // namespace day0::testing
