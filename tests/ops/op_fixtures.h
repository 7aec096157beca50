#pragma once
// Expected values of single ops written by transformers' own modules (tests/data/ops/*.json, made by
// tools/reference/make_op_fixtures.py), and how the tests read and compare them.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "op_test_support.h"

namespace day0::test {

// tests/data/ops/<name>.json; fails the current test (and returns an empty object) when unreadable.
nlohmann::json op_fixture(const std::string& name);
std::vector<float> fixture_floats(const nlohmann::json& fixture, const char* key);
std::vector<int32_t> fixture_ints(const nlohmann::json& fixture, const char* key);

// Largest |got - want| over the largest |want| (+inf on a size mismatch): the error against
// transformers' float32 values, as a fraction of their range.
double error_of_range(const std::vector<float>& got, const std::vector<float>& want);

// The reference backend and every backend under test (every SIMD level, partial).
std::vector<NamedBackend> every_backend();

}  // namespace day0::test
