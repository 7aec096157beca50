#include "day0/serve/timing_backend.h"

#include <chrono>

#include "day0/ops/op_names.h"

namespace day0::serve {

#define D0_TIMED_KERNEL(method, Args, op_name)                                                            \
  void TimingBackend::method(const Args& a) {                                                             \
    const auto t0 = std::chrono::steady_clock::now();                                                     \
    inner_.method(a);                                                                                     \
    seconds_[k_##method] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); \
  }
D0_FOR_EACH_KERNEL(D0_TIMED_KERNEL)
#undef D0_TIMED_KERNEL

std::map<std::string, double> TimingBackend::take() {
  std::map<std::string, double> out;
#define D0_TAKE(method, Args, op_name)                                                \
  if (seconds_[k_##method] > 0) out[std::string(op::op_name)] = seconds_[k_##method]; \
  seconds_[k_##method] = 0;
  D0_FOR_EACH_KERNEL(D0_TAKE)
#undef D0_TAKE
  return out;
}

}  // namespace day0::serve
