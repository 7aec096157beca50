#pragma once
// A golden miniature opened as one process or as this rank's part of a TP x EP split of the two-rank
// test world, shared by the tensor- and expert-parallel tests.
#include <memory>
#include <string>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/dist/process_groups.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_loader.h"

namespace day0::testing {

std::string golden(const std::string& name);  // tests/golden/<name>, or an absolute path as is

struct Opened {
  dist::ProcessGroups groups;  // this rank's TP, EP and stage groups (outlive the engine)
  LoadedModel model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Engine> engine;
};

// One process (tp = ep = 1, no group), or this rank of the test world split as `tp` x `ep` (tp * ep
// ranks: TP 2 or EP 2 over two, TP 2 x EP 2 over four). One backend thread: the ranks share two cores.
// `dp_attention`: EngineOptions::data_parallel_attention (each rank its own sequences).
Opened open_model(const std::string& name, int tp, int ep, MoeCombine combine = MoeCombine::kAllReduce,
                  ActivationPrecision precision = ActivationPrecision::kF32, bool dp_attention = false);

// Largest |difference| between one process's logits of `prompt` [n, vocab] and `part`'s, and the
// largest |logit| (a failed forward gives a huge difference).
struct LogitDiff {
  double max_diff = 0, max_abs = 0;
};
LogitDiff compare_logits(Opened& whole, Opened& part, const std::vector<int32_t>& prompt);
// 12 greedy tokens after a fixed 6-token prompt are the same from `part` as from one process.
void expect_same_greedy_tokens(Opened& whole, Opened& part);

// This rank of the test world split as `layout` (TP x PP x EP = the world's size): its stage's layers,
// TP shard and experts, with the engine wired to its groups. `micro_batches` as EngineOptions.
Opened open_layout(const std::string& name, const dist::ParallelLayout& layout,
                   ActivationPrecision precision = ActivationPrecision::kF32, int micro_batches = 0);

}  // namespace day0::testing
