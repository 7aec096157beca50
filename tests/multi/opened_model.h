#pragma once
// A golden miniature opened as one process or as this rank's part of a TP x EP split of the two-rank
// test world, shared by the tensor- and expert-parallel tests.
#include <memory>
#include <string>

#include "day0/backends/backend.h"
#include "day0/dist/process_groups.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_loader.h"

namespace day0::testing {

std::string golden(const std::string& name);  // tests/golden/<name>

struct Opened {
  LoadedModel model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Engine> engine;
  dist::ProcessGroups groups;  // open_layout(): this rank's groups (outlive the engine)
};

// One process (tp = ep = 1, no group), or this rank of the two-rank world split as `tp` x `ep` (one
// of them 2). One backend thread: two ranks on two cores.
Opened open_model(const std::string& name, int tp, int ep, MoeCombine combine = MoeCombine::kAllReduce,
                  ActivationPrecision precision = ActivationPrecision::kF32);

// This rank of the test world split as `layout` (TP x PP x EP = the world's size): its stage's layers,
// TP shard and experts, with the engine wired to its groups. `micro_batches` as EngineOptions.
Opened open_layout(const std::string& name, const dist::ParallelLayout& layout,
                   ActivationPrecision precision = ActivationPrecision::kF32, int micro_batches = 0);

}  // namespace day0::testing
