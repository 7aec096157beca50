#pragma once
// Process groups of a distributed run: world = TP x PP x EP ranks. A rank's coordinates are
// (pp, ep, tp) with TP fastest (rank = (pp * EP + ep) * TP + tp), so that a tensor-parallel group
// holds neighbouring ranks (one node, the fastest links). Each rank gets a communicator per group:
// its TP group (same pp, ep), its EP group (same pp, tp), its PP group (same ep, tp) and its stage
// group (same pp: the TP x EP ranks that sum their partial MoE outputs, rank = ep * TP + tp).
#include <memory>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/dist/communicator.h"

namespace day0::dist {

struct ParallelLayout {
  int tp = 1;
  int pp = 1;
  int ep = 1;
  int world() const { return tp * pp * ep; }
  std::string to_string() const;  // "TP 2 x PP 1 x EP 1 = 2 ranks"
  bool operator==(const ParallelLayout&) const = default;
};

struct RankCoordinates {
  int tp = 0;
  int pp = 0;
  int ep = 0;
  bool operator==(const RankCoordinates&) const = default;
};

// Degrees in [1, 4096]; InvalidArgument naming the flag otherwise.
Status validate_layout(const ParallelLayout& layout);
// InvalidArgument with both numbers when the launcher started another number of ranks than the
// layout needs: checked before anything is loaded.
Status check_world_size(const ParallelLayout& layout, int world_size);
RankCoordinates coordinates_of(const ParallelLayout& layout, int rank);
int rank_of(const ParallelLayout& layout, const RankCoordinates& coords);

struct ProcessGroups {
  ParallelLayout layout;
  RankCoordinates coords;
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> tp, pp, ep;  // this rank's groups (size 1 where the degree is 1)
  std::shared_ptr<Communicator> stage;       // TP x EP ranks of this rank's pipeline stage
};

// The communicators a rank computes over (TP, EP, the TP x EP group of its stage and its pipeline
// group), each counted once: whose waits make the communication idle time.
std::vector<Communicator*> compute_groups(const ProcessGroups& groups);

// Splits `world` into the layout's groups (collective over world).
Result<ProcessGroups> make_process_groups(std::shared_ptr<Communicator> world, const ParallelLayout& layout);

}  // namespace day0::dist
