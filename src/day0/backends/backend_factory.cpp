// make_backend / open_backend: the backend names users type (--backend) and what they build.
#include <fmt/format.h>

#include "day0/backends/backend.h"
#include "day0/backends/cpu/cpu_backend.h"
#include "day0/backends/reference/reference_backend.h"
#include "day0/graph/resolver.h"

namespace day0 {

const char* compute_unit_name(ComputeUnit unit) {
  switch (unit) {
    case ComputeUnit::kUnknown:
      return "unknown";
    case ComputeUnit::kScalar:
      return "scalar";
    case ComputeUnit::kFp32Fma:
      return "FP32 FMA";
    case ComputeUnit::kFp32FmaAvx2:
      return "FP32 FMA (AVX2)";
    case ComputeUnit::kBf16Dot:
      return "BF16 dot";
    case ComputeUnit::kAmxBf16:
      return "AMX BF16";
    case ComputeUnit::kInt8Avx512Vnni:
      return "INT8 VNNI";
    case ComputeUnit::kInt8Dot:
      return "INT8 dot";
    case ComputeUnit::kAmxInt8:
      return "AMX INT8";
  }
  return "unknown";
}

std::vector<std::string> backend_names() {
  return {"reference", "cpu", "partial"};
}

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options) {
  if (name == "reference") return make_reference_backend();
  if (name == "cpu") return make_cpu_backend(options);
  if (name == "partial") return make_cpu_backend(options, "partial", partial_backend_hidden_kernels());
  return not_found(fmt::format("backend '{}': expected one of {}", name, fmt::join(backend_names(), ", ")));
}

Result<std::unique_ptr<Backend>> open_backend(std::string_view name, const BackendOptions& options) {
  D0_ASSIGN_OR_RETURN(auto primary, make_backend(name, options));
  D0_ASSIGN_OR_RETURN(auto host, make_backend(name == "reference" ? "reference" : "cpu", options));
  return std::unique_ptr<Backend>(std::make_unique<ResolvingBackend>(std::move(primary), std::move(host),
                                                                     options.strict_ops, options.quiet));
}

}  // namespace day0
