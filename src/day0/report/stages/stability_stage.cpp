// Stage 8: a bounded soak — many short requests (each its own sequence and KV cache) on the run
// target; resident memory after warm-up must stay within a bound and no request may fail.
#include <fmt/format.h>

#include <random>

#include "day0/core/human.h"
#include "day0/report/adapt_context.h"
#include "day0/report/soak.h"
#include "day0/report/stages/run_target.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"

namespace day0::report {

void run_stability_stage(AdaptContext& ctx, StageResult& out) {
  auto run = open_run_engine(ctx);
  if (!run.is_ok()) {
    if (run.status().code() == StatusCode::kFailedPrecondition)
      return stage_skip(out, run.status().message());
    return stage_fail(out, run.status().to_string());
  }
  const RunTarget* target = &(*run)->target;
  const LoadedModel* loaded = &(*run)->model;
  EngineHandle* handle = &(*run)->handle;

  const auto vocab = static_cast<int32_t>(loaded->spec.vocab_size);
  auto request = [&](int i) -> Status {
    std::mt19937_64 rng(ctx.options.seed * 1000003ull + static_cast<uint64_t>(i));
    std::uniform_int_distribution<int32_t> token(0, vocab - 1);
    std::vector<int32_t> prompt(static_cast<size_t>(4 + i % 13));  // lengths vary, as real traffic does
    for (auto& t : prompt) t = token(rng);
    SamplingParams sampling;
    sampling.greedy = (i % 2) == 0;
    sampling.temperature = 0.8f;
    sampling.top_p = 0.95f;
    sampling.seed = static_cast<uint64_t>(i);
    D0_ASSIGN_OR_RETURN(GenerationResult r, generate(*handle->engine, prompt, 4, sampling));
    if (r.steps.size() != 4)
      return internal_error(fmt::format("generated {} tokens, wanted 4", r.steps.size()));
    for (const auto& step : r.steps) {
      if (step.chosen.token < 0 || step.chosen.token >= vocab) {
        return internal_error(fmt::format("token {} outside the vocabulary", step.chosen.token));
      }
    }
    return Status::ok();
  };
  SoakOptions options;
  options.max_requests = ctx.options.soak_requests;
  options.max_seconds = ctx.options.soak_seconds;
  options.max_growth_bytes = ctx.options.soak_max_growth_bytes;
  SoakResult result = run_soak(request, options);
  out.evidence = to_json(result);
  out.evidence["target"] = target->label;
  out.evidence["kv_dtype"] = kv_dtype_name(handle->engine->options().kv_dtype);
  out.evidence["max_growth_bytes"] = options.max_growth_bytes;
  if (!result.passed) return stage_fail(out, result.reason);
  stage_pass(out,
             fmt::format("{} requests on {} in {}: resident memory {} after warm-up ({:+.1f} MiB, bound {})",
                         result.requests, target->label, human_seconds(result.seconds),
                         human_bytes_binary(static_cast<double>(result.rss_final_bytes)),
                         static_cast<double>(result.rss_growth_bytes) / (1 << 20),
                         human_bytes_binary(static_cast<double>(options.max_growth_bytes))));
}

}  // namespace day0::report
