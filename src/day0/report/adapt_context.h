#pragma once
// State shared by the stages of one adapt run: what earlier stages found, for later ones to use.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "day0/model/catalog.h"
#include "day0/model/model_summary.h"
#include "day0/report/adapt.h"

namespace day0::report {

struct RunEngine;

struct AdaptContext {
  const AdaptOptions& options;
  std::optional<ResolvedModel> model;   // set by structure
  std::optional<ModelSummary> summary;  // set by structure
  std::filesystem::path work_dir;       // scratch space of this run (removed at the end)
  std::filesystem::path miniature_dir;  // set by miniature when it synthesised one
  bool real_weights = false;            // MODEL is a folder with safetensors shards
  // The model the performance and stability stages run, loaded once for both (stages/run_target.h).
  std::shared_ptr<RunEngine> run_engine;
};

// A stage fills verdict, summary, reason and evidence; the runner sets id, title, required, seconds.
using StageFunction = void (*)(AdaptContext& ctx, StageResult& out);

void run_structure_stage(AdaptContext& ctx, StageResult& out);
void run_coverage_stage(AdaptContext& ctx, StageResult& out);
void run_weights_stage(AdaptContext& ctx, StageResult& out);
void run_miniature_stage(AdaptContext& ctx, StageResult& out);
void run_alignment_stage(AdaptContext& ctx, StageResult& out);
void run_generation_stage(AdaptContext& ctx, StageResult& out);
void run_plan_stage(AdaptContext& ctx, StageResult& out);
void run_distributed_stage(AdaptContext& ctx, StageResult& out);
void run_performance_stage(AdaptContext& ctx, StageResult& out);
void run_stability_stage(AdaptContext& ctx, StageResult& out);

// Helpers for stage code.
inline void stage_pass(StageResult& out, std::string summary) {
  out.verdict = Verdict::kPass;
  out.summary = std::move(summary);
}
inline void stage_fail(StageResult& out, std::string reason) {
  out.verdict = Verdict::kFail;
  out.reason = std::move(reason);
}
inline void stage_skip(StageResult& out, std::string reason) {
  out.verdict = Verdict::kSkipped;
  out.reason = std::move(reason);
}

}  // namespace day0::report
