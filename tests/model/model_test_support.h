#pragma once
// Helpers shared by the model tests: the shared configs folder and small config builders.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace day0::testing {

// <repo>/../shared/configs, or "" when the shared folder is absent (tests then GTEST_SKIP).
std::filesystem::path shared_configs_dir();

}  // namespace day0::testing
