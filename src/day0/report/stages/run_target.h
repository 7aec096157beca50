#pragma once
// Which checkpoint the performance and stability stages run: the real model when its weights are
// here and fit this machine, else the miniature the miniature stage synthesised.
#include <string>

#include "day0/report/adapt_context.h"
#include "day0/runtime/model_loader.h"

namespace day0::report {

struct RunTarget {
  std::string folder;
  std::string label;  // "the real model" / "the miniature"
  std::string why;    // why this one was chosen
};

Result<RunTarget> choose_run_target(const AdaptContext& ctx);

// The run target loaded on the chosen backend, shared by the stages that run it.
struct RunEngine {
  RunTarget target;
  LoadedModel model;
  EngineHandle handle;
};
// Loads the run target the first time it is asked for and keeps it in ctx.
Result<RunEngine*> open_run_engine(AdaptContext& ctx);

}  // namespace day0::report
