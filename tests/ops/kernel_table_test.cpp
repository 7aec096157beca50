// The kernel table (ops/kernel_list.h) is the one list of kernels: every row has an op schema, so that
// coverage and the support matrix name it, and runs natively on the cpu and reference backends for every
// weight format the matrix lists; and the schema names no op without a row.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "day0/graph/coverage.h"
#include "day0/ops/kernel_list.h"
#include "day0/ops/op_names.h"
#include "day0/ops/op_schema.h"

namespace day0 {
namespace {

std::set<std::string> table_ops() {
  std::set<std::string> ops;
#define D0_TABLE_OP(method, Args, constant)                                \
  EXPECT_EQ(op::constant, std::string_view(#method)) << "row " << #method; \
  EXPECT_TRUE(ops.insert(std::string(op::constant)).second) << "row " << #method << " twice";
  D0_FOR_EACH_KERNEL(D0_TABLE_OP)
#undef D0_TABLE_OP
  return ops;
}

TEST(KernelTable, EveryRowHasASchemaAndEverySchemaARow) {
  const std::set<std::string> ops = table_ops();
  EXPECT_GE(ops.size(), 40u);
  for (const std::string& name : ops) EXPECT_NE(find_op_schema(name), nullptr) << name;
  std::set<std::string> schemas;
  for (const OpSchema& s : op_schemas()) schemas.insert(std::string(s.name));
  EXPECT_EQ(schemas, ops);
}

TEST(KernelTable, CoverageNamesEveryRowAndTheCpuAndReferenceBackendsRunIt) {
  const nlohmann::json matrix = support_matrix_json();
  std::set<std::string> named;
  for (const nlohmann::json& row : matrix.at("matrix")) {
    const std::string name = row.at("op").get<std::string>();
    named.insert(name);
    for (const char* backend : {"cpu", "reference"}) {
      EXPECT_EQ(row.at("backends").at(backend).get<std::string>(), "native")
          << name << " with " << row.at("weights").get<std::string>() << " weights on " << backend;
    }
  }
  EXPECT_EQ(named, table_ops());
}

}  // namespace
}  // namespace day0
