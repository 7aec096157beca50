#pragma once
// A small JSON Schema validator for the subset our published schemas use: type (string or list),
// required, properties, additionalProperties (bool or schema), items, enum, const, minimum, maximum,
// minItems. Errors name the JSON pointer of the offending value.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace day0::report {

// Every violation found, as "/stages/3/verdict: expected one of [pass, fail, skipped]". Empty = valid.
std::vector<std::string> validate_json(const nlohmann::json& doc, const nlohmann::json& schema);

// The report.json schema (JSON Schema), versioned with kReportSchema.
const nlohmann::json& report_json_schema();

}  // namespace day0::report
