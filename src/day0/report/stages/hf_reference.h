#pragma once
// The miniature stage's second reference: Hugging Face transformers itself, run by
// tools/reference/dump_reference.py under a Python that has torch and transformers. Our reference
// backend only checks our kernels; transformers also checks how the config was read (a misread
// partial_rotary_factor or activation constant fails here, not there).
#include <filesystem>
#include <string>

#include "day0/core/status.h"

namespace day0::report {

struct HfReferenceRun {
  bool attempted = false;  // false: no usable Python (reason says why), nothing was run
  std::string python;      // the interpreter used
  std::string versions;    // "torch X, transformers Y" as the interpreter reported them
  std::string dump_path;   // the day0-reference/1 dump written (when attempted and it worked)
  std::string reason;      // why it was not attempted, or why the dump failed
  bool failed = false;     // attempted and the dump did not come out
};

// `requested`: AdaptOptions::reference_python ("" = find one, "none" = off, else a path). Writes the
// dump (F32, two seeded random prompts of lengths 7 and 23, 4 greedy tokens, hidden states) of `model_dir`
// into `work_dir`; the script's output goes to work_dir/hf-reference.log. Bounded by `timeout_seconds`.
HfReferenceRun dump_with_transformers(const std::string& requested, const std::filesystem::path& model_dir,
                                      const std::filesystem::path& work_dir, uint64_t seed,
                                      double timeout_seconds = 600.0);

}  // namespace day0::report
