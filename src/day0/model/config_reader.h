#pragma once
// Typed, validated access to a JSON config object. Every error names the source file, the key path
// and what was expected versus what was found, e.g.
//   "ds/config.json: rope_scaling.factor: expected a number, found \"forty\"".
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"

namespace day0 {

class ConfigReader {
 public:
  // `object` must outlive the reader. `path` is the key path of `object` inside the file ("" = root).
  ConfigReader(const nlohmann::json& object, std::string source, std::string path = "");

  const std::string& source() const { return source_; }
  const nlohmann::json& json() const { return *object_; }
  // "rope_scaling.factor" for key "factor" under path "rope_scaling".
  std::string key_path(std::string_view key) const;

  bool contains(std::string_view key) const;  // present, even if null
  bool present(std::string_view key) const;   // present and not null

  // Integers: required ones must be present and non-null; all must lie in [min, max].
  Result<int64_t> required_int(std::string_view key, int64_t min = 1, int64_t max = kMaxSize) const;
  Result<int64_t> optional_int(std::string_view key, int64_t fallback, int64_t min = 0,
                               int64_t max = kMaxSize) const;
  Result<double> required_double(std::string_view key) const;
  Result<double> optional_double(std::string_view key, double fallback) const;
  Result<bool> optional_bool(std::string_view key, bool fallback) const;
  Result<std::string> required_string(std::string_view key) const;
  Result<std::string> optional_string(std::string_view key, std::string fallback) const;
  // Absent or null gives an empty list.
  Result<std::vector<int64_t>> optional_int_list(std::string_view key, int64_t min = 0,
                                                 int64_t max = kMaxSize) const;
  Result<std::vector<std::string>> optional_string_list(std::string_view key) const;
  // A nested object; nullopt when absent or null, an error when present but not an object.
  Result<std::optional<ConfigReader>> optional_object(std::string_view key) const;

  // "source: key.path: expected <expected>, found <found value>".
  Status mismatch(std::string_view key, std::string_view expected) const;
  Status invalid(std::string_view key, std::string_view message) const;

  // Key paths this reader and the readers of its nested objects looked up (present or not): the
  // keys a family consumes. Shared by every reader derived from one root.
  const std::set<std::string>& used_keys() const { return *used_; }
  // A reader over another object (a merged copy) whose lookups count as this reader's.
  ConfigReader derived(const nlohmann::json& object, std::string path) const;
  // Marks `key` consumed without reading it (a key whose value is checked elsewhere).
  void mark_used(std::string_view key) const;

  // Largest size we accept for any single dimension (2^50): larger values are certainly bogus and
  // would only push products towards overflow.
  static constexpr int64_t kMaxSize = int64_t{1} << 50;

 private:
  const nlohmann::json* find(std::string_view key) const;
  Result<int64_t> to_int(std::string_view key, const nlohmann::json& value, int64_t min, int64_t max) const;

  const nlohmann::json* object_;
  std::string source_;
  std::string path_;
  std::shared_ptr<std::set<std::string>> used_ = std::make_shared<std::set<std::string>>();
};

// A short rendering of a JSON value for error messages (strings quoted, long values cut).
std::string describe_json(const nlohmann::json& value);

}  // namespace day0
