#include "day0/backends/reference/reference_backend.h"

#include "day0/backends/kernel_list.h"
#include "day0/backends/reference/reference_kernels.h"
#include "day0/ops/op_schema.h"

namespace day0 {

namespace {

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  bool supports(const OpKey& key) const override { return find_op_schema(key.op) != nullptr; }
  ComputeUnit matmul_unit(WeightFormat, bool, int64_t) const override { return ComputeUnit::kScalar; }

#define D0_FORWARD(method, Args, op_name) \
  void method(const Args& a) override {   \
    ref::method(a);                       \
  }
  D0_FOR_EACH_KERNEL(D0_FORWARD)
#undef D0_FORWARD
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace day0
