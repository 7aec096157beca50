#pragma once
// How many tokens each routed expert of each MoE layer took in a recorded run: what redundant experts
// (expert_placement.h) are placed by. `day0 run --record-expert-load FILE` writes it, `--expert-load
// FILE` reads it back.
//
// The file (JSON):
//   {"format": "day0-expert-load", "version": 1, "model": "<folder, informative>",
//    "n_experts": E,
//    "layers": [{"layer": 1, "picks": [p_0, ..., p_{E-1}]}, ...]}
// one entry per MoE decoder layer (every one of the model's, in any order), `picks` the router's
// (token, expert) picks of each expert summed over the run (non-negative integers).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "day0/core/status.h"
#include "day0/dist/expert_placement.h"

namespace day0::dist {

struct ExpertLoad {
  int64_t n_experts = 0;
  std::map<int64_t, std::vector<int64_t>> layers;  // decoder layer -> [n_experts] picks
};

// Reads and checks the file's shape (format, version, types, lengths); bad input names the file and the
// key.
Result<ExpertLoad> read_expert_load(const std::string& path);
// The same from the file's text (`path` names it in messages): what the fuzz target drives.
Result<ExpertLoad> parse_expert_load(std::string_view text, const std::string& path);
// Whether `load` (read from `path`) fits a model of `n_experts` whose MoE layers are `moe_layers`:
// InvalidArgument naming the file, the key, what was expected and what was found.
Status check_expert_load(const ExpertLoad& load, const std::string& path, int64_t n_experts,
                         std::span<const int64_t> moe_layers);
std::string expert_load_json(const ExpertLoad& load, const std::string& model);
Status write_expert_load(const std::string& path, const ExpertLoad& load, const std::string& model);

// Every layer's placement (expert_placement.h): one rule for the binder, the engine and `run`'s report.
struct ExpertPlacement {
  int64_t redundant = 0;                     // extra copies per MoE layer
  std::vector<LayerExpertPlacement> layers;  // [n_layers]; empty for dense layers
};
// Places `redundant` copies in each of `moe_layers` (of `n_layers`), by `load` when given (checked
// with check_expert_load first), else every expert weighing the same.
std::shared_ptr<const ExpertPlacement> place_model_experts(int64_t n_experts, int ep, int64_t redundant,
                                                           int64_t n_layers,
                                                           std::span<const int64_t> moe_layers,
                                                           const ExpertLoad* load);

}  // namespace day0::dist
