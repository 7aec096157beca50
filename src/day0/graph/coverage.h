#pragma once
// Static coverage: for every op of a model's recorded operator list (model/op_list.h,
// runtime/op_recording.h), where it would run on a
// backend (native / decomposed into what / host fallback / missing) and what share of the per-token
// FLOPs and bytes falls in each class; plus the op x backend x weight-format support matrix,
// generated from the registry (never written by hand).
#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/backends/backend.h"
#include "day0/graph/resolver.h"
#include "day0/model/op_list.h"

namespace day0 {

struct CoverageRow {
  OpSpec op;
  OpKey key;  // key.op points into op.name
  Resolution resolution;
  std::string introduced_by;  // for missing ops: the config fields that brought the op in
};

struct CoverageReport {
  std::string model;
  std::string backend;
  std::string host;
  bool strict_ops = false;
  int64_t context_tokens = 0;
  bool bf16_activations = false;  // the list was recorded with BF16 activations (OpList)
  std::vector<CoverageRow> rows;
  // Indexed by Placement.
  std::array<double, 4> flops{};
  std::array<double, 4> bytes{};
  std::array<int, 4> ops{};
  double total_flops = 0;
  double total_bytes = 0;
  // Anything missing, or any host fallback under strict_ops.
  bool failed() const;
};

Result<CoverageReport> compute_coverage(const std::string& model_name, const OpList& list,
                                        std::string_view backend, const BackendOptions& options);

// "prefill+decode", "prefill" or "decode": the steps that call the op.
std::string op_steps(const OpSpec& op);
std::string coverage_text(const CoverageReport& report);
nlohmann::json coverage_json(const CoverageReport& report);

// Support matrix over every schema op, every backend of backend_names() and, for weight-reading ops,
// every weight format.
std::string support_matrix_text();
nlohmann::json support_matrix_json();

}  // namespace day0
