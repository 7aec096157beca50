#pragma once
// Fallback resolution (the ONNX Runtime / ggml scheme): for each (op, weight format) the primary
// backend runs it natively if it supports() it; else the op is decomposed into the simpler ops of its
// schema, repeatedly, as long as every piece ends up native; else it runs on the host backend (same
// memory space today, so no copies) with a warning naming it; else it is missing.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/backends/kernel_list.h"

namespace day0 {

enum class Placement { kNative, kDecomposed, kHostFallback, kMissing };
const char* placement_name(Placement p);  // "native", "decomposed", "host fallback", "missing"

struct Resolution {
  Placement placement = Placement::kMissing;
  std::vector<std::string> pieces;  // kDecomposed: the native ops it finally runs as, e.g. "silu", "mul"
};

// Pure function of the two backends' supports() and the schema table. host may be null (no fallback).
Resolution resolve_op(const Backend& primary, const Backend* host, const OpKey& key);

// The resolving backend behind open_backend(). Owns both backends. Host fallback prints one warning
// per op on stderr ("warning: op 'moe_router' has no kernel on backend 'partial': running it on host
// backend 'cpu'") unless quiet; with strict_ops it throws InternalError instead (check with
// check_strict() first to get a Status).
class ResolvingBackend final : public Backend {
 public:
  ResolvingBackend(std::unique_ptr<Backend> primary, std::unique_ptr<Backend> host, bool strict_ops,
                   bool quiet);

  std::string_view name() const override { return primary_->name(); }
  MemorySpace memory_space() const override { return primary_->memory_space(); }
  ThreadPool* thread_pool() override { return primary_->thread_pool(); }
  // True unless the op is missing everywhere (or would need the host under strict_ops).
  bool supports(const OpKey& key) const override;
  void synchronize() override;
  // The unit of the backend matmul() would route this weight format to.
  ComputeUnit matmul_unit(WeightFormat weights, bool exact, int64_t rows) const override;

  Resolution resolution(const OpKey& key) const;
  // Unsupported naming the first key that is missing, or needs host fallback under strict_ops.
  Status check_strict(const std::vector<OpKey>& keys) const;
  Backend& primary() { return *primary_; }

  D0_DECLARE_KERNEL_OVERRIDES

 private:
  // Where a call goes; warns once per op on host fallback, throws on missing / strict.
  Placement route(const OpKey& key);

  std::unique_ptr<Backend> primary_;
  std::unique_ptr<Backend> host_;
  bool strict_ops_;
  bool quiet_;
  std::mutex mutex_;
  // Keyed by the op name constants of op_names.h (static storage): no string copy per call.
  std::map<std::pair<std::string_view, int>, Placement> cache_;
};

}  // namespace day0
