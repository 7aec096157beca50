#pragma once
// Which checkpoint the performance and stability stages run: the real model when its weights are
// here and fit this machine, else the miniature the miniature stage synthesised.
#include <string>

#include "day0/report/adapt_context.h"

namespace day0::report {

struct RunTarget {
  std::string folder;
  std::string label;  // "the real model" / "the miniature"
  std::string why;    // why this one was chosen
};

Result<RunTarget> choose_run_target(const AdaptContext& ctx);

// Weight bytes one decoded token reads: everything but the input embedding, routed experts at their
// top-k share (the lm_head is read in full; a tied head reads the embedding).
double activated_weight_bytes_per_token(const ModelSpec& spec);

}  // namespace day0::report
