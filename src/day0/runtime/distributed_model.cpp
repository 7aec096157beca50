#include "day0/runtime/distributed_model.h"

#include <cstdint>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "day0/model/catalog.h"
#include "day0/runtime/packed_int_source.h"

namespace day0 {
namespace {

// Every rank learns which ranks failed: an all-gather of one flag each.
Status agree(dist::Communicator& world, const Status& mine, const char* what) {
  const int32_t failed = mine.is_ok() ? 0 : 1;
  std::vector<int32_t> all(static_cast<size_t>(world.size()));
  D0_RETURN_IF_ERROR(world.all_gather_of<int32_t>(std::span<const int32_t>(&failed, 1), all));
  if (!mine.is_ok()) return mine;
  for (int r = 0; r < world.size(); ++r) {
    if (all[static_cast<size_t>(r)] != 0)
      return failed_precondition(
          fmt::format("{} failed on {} (its own message says why)", what, world.describe_rank(r)));
  }
  return Status::ok();
}

}  // namespace

Result<DistributedModel> load_distributed_model(const std::string& model, const dist::ParallelLayout& layout,
                                                LoadOptions load, const dist::CommOptions& comm,
                                                const RedundantExperts& redundant) {
  D0_RETURN_IF_ERROR(dist::validate_layout(layout));
  if (redundant.count < 0 || (redundant.count > 0 && layout.ep < 2))
    return dist::check_redundant_experts(0, layout.ep, redundant.count);
  if (!redundant.load_file.empty() && redundant.count == 0) {
    return invalid_argument(
        fmt::format("--expert-load {}: the load places redundant expert copies: it needs "
                    "--redundant-experts N",
                    redundant.load_file));
  }
  std::shared_ptr<const dist::ExpertPlacement> placement;
  if (layout.tp > 1 || layout.ep > 1 || layout.pp > 1) {
    // Whether the model splits this way, from its config alone: every rank answers the same before any
    // rank opens the world or reads a weight.
    D0_ASSIGN_OR_RETURN(ResolvedModel resolved, resolve_model(model));
    const ModelSpec spec = unpacked_spec(resolved.spec);
    D0_RETURN_IF_ERROR(check_engine_runs(spec));
    D0_RETURN_IF_ERROR(check_expert_parallel(spec, layout.ep));
    D0_RETURN_IF_ERROR(check_tensor_parallel(spec, layout.tp));
    D0_RETURN_IF_ERROR(check_pipeline_parallel(spec, layout.pp));
    if (redundant.count > 0) {
      D0_RETURN_IF_ERROR(dist::check_redundant_experts(spec.moe->n_experts, layout.ep, redundant.count));
      std::vector<int64_t> moe_layers;
      for (int64_t l = 0; l < spec.n_layers; ++l)
        if (spec.layers[static_cast<size_t>(l)].moe) moe_layers.push_back(l);
      std::optional<dist::ExpertLoad> recorded;
      if (!redundant.load_file.empty()) {
        D0_ASSIGN_OR_RETURN(recorded, dist::read_expert_load(redundant.load_file));
        D0_RETURN_IF_ERROR(
            dist::check_expert_load(*recorded, redundant.load_file, spec.moe->n_experts, moe_layers));
      }
      placement = dist::place_model_experts(spec.moe->n_experts, layout.ep, redundant.count, spec.n_layers,
                                            moe_layers, recorded ? &*recorded : nullptr);
    }
  }
  std::shared_ptr<dist::Communicator> world;
  if (layout.world() > 1 || dist::launched_by_mpirun()) {
    D0_ASSIGN_OR_RETURN(world, dist::open_mpi_world(comm));
  } else {
    world = dist::make_single_process_communicator();
  }
  // Before loading anything: the launcher's rank count against the layout.
  D0_RETURN_IF_ERROR(dist::check_world_size(layout, world->size()));
  DistributedModel out;
  D0_ASSIGN_OR_RETURN(out.groups, dist::make_process_groups(world, layout));
  load.shard = TensorShard{out.groups.coords.tp, layout.tp};
  load.experts = ExpertShard{out.groups.coords.ep, layout.ep, placement};
  load.stage = PipelineStage{out.groups.coords.pp, layout.pp};
  Result<LoadedModel> loaded = load_model(model, load);
  D0_RETURN_IF_ERROR(agree(*world, loaded.status(), "loading the model"));
  out.model = std::move(loaded).value();
  return out;
}

}  // namespace day0
