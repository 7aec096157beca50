#include "day0/dist/process_groups.h"

#include <algorithm>

#include <fmt/format.h>

namespace day0::dist {

std::string ParallelLayout::to_string() const {
  return fmt::format("TP {} x PP {} x EP {} = {} ranks", tp, pp, ep, world());
}

Status validate_layout(const ParallelLayout& layout) {
  constexpr int kMaxDegree = 4096;
  const std::pair<const char*, int> degrees[] = {
      {"--tp", layout.tp}, {"--pp", layout.pp}, {"--ep", layout.ep}};
  for (const auto& [flag, degree] : degrees) {
    if (degree < 1 || degree > kMaxDegree)
      return invalid_argument(fmt::format("{} {}: a degree must be in [1, {}]", flag, degree, kMaxDegree));
  }
  if (static_cast<int64_t>(layout.tp) * layout.pp * layout.ep > kMaxDegree)
    return invalid_argument(fmt::format("{}: more than {} ranks", layout.to_string(), kMaxDegree));
  return Status::ok();
}

Status check_world_size(const ParallelLayout& layout, int world_size) {
  D0_RETURN_IF_ERROR(validate_layout(layout));
  if (world_size != layout.world()) {
    return invalid_argument(fmt::format(
        "the launcher started {} rank{}, the layout {} needs {}: run `mpirun -np {}` or change "
        "--tp/--pp/--ep",
        world_size, world_size == 1 ? "" : "s", layout.to_string(), layout.world(), layout.world()));
  }
  return Status::ok();
}

RankCoordinates coordinates_of(const ParallelLayout& layout, int rank) {
  RankCoordinates c;
  c.tp = rank % layout.tp;
  c.ep = (rank / layout.tp) % layout.ep;
  c.pp = rank / (layout.tp * layout.ep);
  return c;
}

int rank_of(const ParallelLayout& layout, const RankCoordinates& c) {
  return (c.pp * layout.ep + c.ep) * layout.tp + c.tp;
}

Result<ProcessGroups> make_process_groups(std::shared_ptr<Communicator> world, const ParallelLayout& layout) {
  D0_RETURN_IF_ERROR(check_world_size(layout, world->size()));
  ProcessGroups g;
  g.layout = layout;
  g.coords = coordinates_of(layout, world->rank());
  const RankCoordinates& c = g.coords;
  // One color per group: the coordinates the members share.
  D0_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> tp, world->split(c.pp * layout.ep + c.ep, c.tp));
  D0_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> ep, world->split(c.pp * layout.tp + c.tp, c.ep));
  D0_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> pp, world->split(c.ep * layout.tp + c.tp, c.pp));
  D0_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> stage, world->split(c.pp, c.ep * layout.tp + c.tp));
  g.tp = std::move(tp);
  g.ep = std::move(ep);
  g.pp = std::move(pp);
  g.stage = std::move(stage);
  g.world = std::move(world);
  return g;
}

std::vector<Communicator*> compute_groups(const ProcessGroups& g) {
  std::vector<Communicator*> out;
  for (Communicator* c : {g.tp.get(), g.ep.get(), g.stage.get(), g.pp.get()}) {
    if (c != nullptr && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

}  // namespace day0::dist
