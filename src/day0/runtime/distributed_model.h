#pragma once
// A model loaded for a distributed run: the process groups of the layout (world = TP x PP x EP) and
// this rank's shard of the weights. What `day0 run` (and later `day0 serve`) call under mpirun.
#include <cstdint>
#include <memory>
#include <string>

#include "day0/core/status.h"
#include "day0/dist/communicator.h"
#include "day0/dist/process_groups.h"
#include "day0/runtime/model_loader.h"

namespace day0 {

struct DistributedModel {
  dist::ProcessGroups groups;  // world and groups of size 1 in a single process
  LoadedModel model;           // this rank's shard
  bool distributed() const { return groups.world && groups.world->size() > 1; }
  int rank() const { return groups.world ? groups.world->rank() : 0; }
};

// Redundant experts (EPLB) of an expert-parallel run: `count` extra physical copies per MoE layer,
// placed by the per-expert load recorded in `load_file` (dist/expert_load.h), or with every expert
// weighing the same when it is empty (dist/expert_placement.h).
struct RedundantExperts {
  int64_t count = 0;
  std::string load_file;
};

// Opens the world (MPI when the layout needs more than one rank or mpirun started the process, a
// single-process group otherwise), refuses a world size that does not match `layout` before loading
// anything, then loads this rank's shard. A failure on any rank fails every rank (the ranks agree on
// the outcome), so that none is left waiting in a collective. `redundant` copies are checked (count,
// load file against the config) before the world opens too.
Result<DistributedModel> load_distributed_model(const std::string& model, const dist::ParallelLayout& layout,
                                                LoadOptions load, const dist::CommOptions& comm,
                                                const RedundantExperts& redundant = {});

}  // namespace day0
