#include "op_fixtures.h"

#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "day0/core/json_reader.h"

namespace day0::test {

nlohmann::json op_fixture(const std::string& name) {
  auto json = read_json_file(std::string(DAY0_TEST_DATA_DIR) + "/data/ops/" + name + ".json");
  EXPECT_TRUE(json.is_ok()) << json.status().to_string();
  return json.is_ok() ? json.value() : nlohmann::json::object();
}

std::vector<float> fixture_floats(const nlohmann::json& fixture, const char* key) {
  return fixture.at(key).get<std::vector<float>>();
}

std::vector<int32_t> fixture_ints(const nlohmann::json& fixture, const char* key) {
  return fixture.at(key).get<std::vector<int32_t>>();
}

double error_of_range(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0.0, range = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(double{got[i]} - want[i]));
    range = std::max(range, std::abs(double{want[i]}));
  }
  return range > 0.0 ? worst / range : worst;
}

std::vector<NamedBackend> every_backend() {
  std::vector<NamedBackend> all = backends_under_test();
  all.push_back({"reference", reference_backend()});
  return all;
}

}  // namespace day0::test
