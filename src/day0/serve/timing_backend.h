#pragma once
// A backend wrapper that times every kernel call by operator kind (the server's "time per operator
// kind" metric: a share per op follows). Wall time around each call, then synchronize-free: host
// backends run kernels synchronously, so the time is the kernel's. The kernel list comes from
// D0_FOR_EACH_KERNEL, so a new kernel is timed without an edit here.
// Thread safety: like any backend, one caller thread (the engine thread); take() from the same thread.
#include <array>
#include <map>
#include <string>

#include "day0/backends/backend.h"
#include "day0/backends/kernel_list.h"

namespace day0::serve {

class TimingBackend final : public Backend {
 public:
  explicit TimingBackend(Backend& inner) : inner_(inner) {}

  std::string_view name() const override { return inner_.name(); }
  MemorySpace memory_space() const override { return inner_.memory_space(); }
  ThreadPool* thread_pool() override { return inner_.thread_pool(); }
  bool supports(const OpKey& key) const override { return inner_.supports(key); }
  void synchronize() override { inner_.synchronize(); }

#define D0_TIMED_KERNEL(method, Args, op_name) void method(const Args& a) override;
  D0_FOR_EACH_KERNEL(D0_TIMED_KERNEL)
#undef D0_TIMED_KERNEL

  // Seconds per operator since the last take(), by op name; resets them.
  std::map<std::string, double> take();

 private:
  enum Kernel : int {
#define D0_KERNEL_INDEX(method, Args, op_name) k_##method,
    D0_FOR_EACH_KERNEL(D0_KERNEL_INDEX)
#undef D0_KERNEL_INDEX
        kKernelCount
  };
  Backend& inner_;
  std::array<double, kKernelCount> seconds_{};
};

}  // namespace day0::serve
