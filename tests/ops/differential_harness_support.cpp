#include "differential_harness.h"

namespace day0::test {

namespace {
std::vector<NamedBackend>& shared_backends() {
  static std::vector<NamedBackend> backends = backends_under_test();
  return backends;
}
Backend& shared_reference() {
  static std::unique_ptr<Backend> ref = reference_backend();
  return *ref;
}
}  // namespace

Differential::Differential() = default;

void Differential::check(const std::string& op, const std::string& case_name, int64_t rows, int64_t cols,
                         double tolerance, const CaseFn& fn) {
  GuardedMatrix expected(rows, cols);
  fn(shared_reference(), expected);
  ASSERT_TRUE(expected.guards_intact()) << "reference wrote outside its output in " << op << " " << case_name;
  for (auto& nb : shared_backends()) {
    GuardedMatrix got(rows, cols);
    fn(*nb.backend, got);
    table_.add(op, nb.label, case_name, nmse(got.values(), expected.values()), tolerance,
               got.guards_intact());
  }
}

int Differential::finish() {
  EXPECT_EQ(table_.failures(), 0) << table_.failures() << " of " << table_.cases() << " cases failed:\n"
                                  << table_.failure_table();
  EXPECT_GT(table_.cases(), 0);
  return table_.cases();
}

}  // namespace day0::test
