#pragma once
// A recording backend: a decorator over any Backend that notes every kernel call (op name, the weight
// it reads, attributes and shapes from its arguments, weight format, step phase) with what the call
// costs, then forwards it. Without an inner backend it records only: kernels compute nothing (outputs
// keep what the caller put there; argmax and sample pick token 0), which is how the operator list of
// a full-size model is recorded from its config alone (runtime/op_recording.h).
//
// Costs are those of model/op_list.h. Attention and indexers are costed as if each query of the step saw
// `attention_context` cached tokens plus itself, reading the keys model/attention_cost.h's row_keys()
// gives (its window, compressed entries, sparse selection), so that a step over a short recorded sequence
// gives the figures of a long one; -1 costs the keys the call actually held.
// Threading: as the inner backend (one caller thread).
#include <cstdint>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/backends/kernel_list.h"
#include "day0/model/attention_cost.h"
#include "day0/model/op_list.h"

namespace day0 {

enum class StepPhase { kPrefill, kDecode };

struct RecordedCall {
  StepPhase phase = StepPhase::kDecode;
  OpSpec op;  // calls_per_token 1, costs of this one call
};

class RecordingBackend final : public Backend {
 public:
  // `inner` (may be null: record only) must outlive the recorder.
  explicit RecordingBackend(Backend* inner, int64_t attention_context = -1);

  void set_phase(StepPhase phase) { phase_ = phase; }
  const std::vector<RecordedCall>& calls() const { return calls_; }
  void clear() { calls_.clear(); }
  // The calls merged: decode calls with the same name, weight, attributes and shapes become one
  // entry (their count and costs summed); a prefill call marks the decode entry of the same name,
  // weight and attributes, or becomes a prefill-only entry (no calls per decoded token).
  OpList op_list() const;

  std::string_view name() const override { return inner_ ? inner_->name() : "recording"; }
  MemorySpace memory_space() const override { return inner_ ? inner_->memory_space() : MemorySpace::kHost; }
  ThreadPool* thread_pool() override { return inner_ ? inner_->thread_pool() : nullptr; }
  bool supports(const OpKey& key) const override;
  void synchronize() override {
    if (inner_) inner_->synchronize();
  }
  ComputeUnit matmul_unit(WeightFormat weights, bool exact, int64_t rows) const override {
    return inner_ ? inner_->matmul_unit(weights, exact, rows) : ComputeUnit::kUnknown;
  }

  D0_DECLARE_KERNEL_OVERRIDES

 private:
  void note(OpSpec op);
  // Keys each query row of a call holding `held` keys is costed with (see above), by what it reaches.
  RowKeys keys_for(int64_t held, const KeyReach& reach) const;

  Backend* inner_;
  int64_t attention_context_;
  StepPhase phase_ = StepPhase::kPrefill;
  std::vector<RecordedCall> calls_;
};

// "self_attn.q_proj" for "model.layers.3.self_attn.q_proj.weight": the decoder prefix, the layer and
// ".weight" go, an expert index becomes "*".
std::string weight_label(std::string_view tensor_name);

}  // namespace day0
