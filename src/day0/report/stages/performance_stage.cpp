// Stage 7: prefill and decode tokens/s and time to first token on this machine, with the decode
// roofline (activated weight bytes per token over the memory bandwidth measured here, now).
#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <thread>

#include "day0/backends/cpu/machine_limits.h"
#include "day0/core/human.h"
#include "day0/model/model_memory.h"
#include "day0/report/adapt_context.h"
#include "day0/report/stages/run_target.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"

namespace day0::report {

void run_performance_stage(AdaptContext& ctx, StageResult& out) {
  auto run = open_run_engine(ctx);
  if (!run.is_ok()) {
    if (run.status().code() == StatusCode::kFailedPrecondition)
      return stage_skip(out, run.status().message());
    return stage_fail(out, run.status().to_string());
  }
  const RunTarget* target = &(*run)->target;
  const LoadedModel* loaded = &(*run)->model;
  EngineHandle* handle = &(*run)->handle;

  std::mt19937_64 rng(ctx.options.seed + 17);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(loaded->spec.vocab_size - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(std::max(1, ctx.options.prompt_tokens)));
  for (auto& t : prompt) t = token(rng);
  const int64_t new_tokens = std::max(2, ctx.options.new_tokens);
  // One warm-up run (page faults, pool start), then the best of three measured runs.
  if (auto warm = generate(*handle->engine, prompt, 2, SamplingParams{}); !warm.is_ok())
    return stage_fail(out, warm.status().to_string());
  GenerationResult best;
  double best_decode = -1;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto measured = generate(*handle->engine, prompt, new_tokens, SamplingParams{});
    if (!measured.is_ok()) return stage_fail(out, measured.status().to_string());
    GenerationResult r = std::move(measured).value();
    if (r.decode_tokens_per_second() > best_decode) {
      best_decode = r.decode_tokens_per_second();
      best = std::move(r);
    }
  }

  ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  BandwidthProbe probe;
  const double bandwidth_gbps = probe.read_gbps(pool, 3);
  const double bytes_per_token = activated_weights_per_token(loaded->spec).bytes;
  const double roofline = bytes_per_token > 0 ? bandwidth_gbps * 1e9 / bytes_per_token : 0;
  const double decode = best.decode_tokens_per_second();
  const double prefill = best.prefill_tokens_per_second();
  out.evidence = {{"target", target->label},
                  {"why", target->why},
                  {"prompt_tokens", prompt.size()},
                  {"new_tokens", new_tokens},
                  {"threads", pool.size()},
                  {"kv_dtype", kv_dtype_name(handle->engine->options().kv_dtype)},
                  {"prefill_tok_s", prefill},
                  {"decode_tok_s", decode},
                  {"ttft_s", best.prefill_seconds},
                  {"bandwidth_gbps", bandwidth_gbps},
                  {"activated_weight_bytes_per_token", bytes_per_token},
                  {"decode_roofline_tok_s", roofline},
                  {"roofline_fraction", roofline > 0 ? decode / roofline : 0.0}};
  if (!(decode > 0) || !(prefill > 0)) return stage_fail(out, "no tokens were generated");
  std::string summary = fmt::format(
      "{} ({} KV cache): prefill {:.1f} tok/s, decode {:.1f} tok/s, TTFT {}; decode is {:.2f} of the "
      "{:.0f} tok/s bandwidth roofline ({:.1f} GB/s measured)",
      target->label, kv_dtype_name(handle->engine->options().kv_dtype), prefill, decode,
      human_seconds(best.prefill_seconds), roofline > 0 ? decode / roofline : 0.0, roofline, bandwidth_gbps);
  if (target->label == "the miniature") summary += " — a miniature is overhead-bound, so its fraction is low";
  stage_pass(out, summary);
}

}  // namespace day0::report
