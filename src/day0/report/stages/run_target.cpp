#include "day0/report/stages/run_target.h"

#include <fmt/format.h>

#include "day0/core/human.h"
#include "day0/report/machine_info.h"

namespace day0::report {

Result<RunTarget> choose_run_target(const AdaptContext& ctx) {
  if (ctx.real_weights && ctx.summary) {
    const uint64_t stored = ctx.summary->params.stored_bytes;
    const uint64_t available = read_machine_info().memory_available_bytes;
    if (stored <= available / 2) {
      return RunTarget{ctx.model->folder.string(), "the real model", "its weights fit this machine"};
    }
    if (!ctx.miniature_dir.empty()) {
      return RunTarget{
          ctx.miniature_dir.string(), "the miniature",
          fmt::format("the real weights ({}) do not fit half of the free memory ({})",
                      human_bytes(static_cast<double>(stored)), human_bytes(static_cast<double>(available)))};
    }
  }
  if (!ctx.miniature_dir.empty()) {
    return RunTarget{ctx.miniature_dir.string(), "the miniature", "MODEL has no weights here"};
  }
  return failed_precondition("neither real weights that fit nor a miniature to run");
}

Result<RunEngine*> open_run_engine(AdaptContext& ctx) {
  if (ctx.run_engine) return ctx.run_engine.get();
  D0_ASSIGN_OR_RETURN(RunTarget target, choose_run_target(ctx));
  EngineOptions options;
  D0_ASSIGN_OR_RETURN(LoadedModel model, load_model(target.folder, load_options_for(options.precision)));
  options.kv_dtype = ctx.options.kv_dtype;
  D0_ASSIGN_OR_RETURN(EngineHandle handle, open_engine(model, ctx.options.backend, options));
  ctx.run_engine =
      std::make_shared<RunEngine>(RunEngine{std::move(target), std::move(model), std::move(handle)});
  return ctx.run_engine.get();
}

}  // namespace day0::report
