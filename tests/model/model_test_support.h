#pragma once
// Helpers shared by the model tests: the shared configs folder and small config builders.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "day0/model/catalog.h"

namespace day0::testing {

// <repo>/../shared/configs, or "" when the shared folder is absent (tests then GTEST_SKIP).
std::filesystem::path shared_configs_dir();

// The spec of a catalog entry; a parse failure fails the calling test (and gives an empty spec).
inline ModelSpec catalog_spec(const char* name) {
  auto spec = catalog_model(name);
  EXPECT_TRUE(spec.is_ok()) << name << ": " << spec.status().to_string();
  return spec.is_ok() ? *spec : ModelSpec{};
}

}  // namespace day0::testing
