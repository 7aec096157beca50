#include "opened_model.h"

#include <gtest/gtest.h>

#include "world.h"

namespace day0::testing {

std::string golden(const std::string& name) {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

Opened open_model(const std::string& name, int tp, int ep, MoeCombine combine,
                  ActivationPrecision precision) {
  Opened o;
  dist::Communicator* w = tp * ep > 1 ? test_world() : nullptr;
  LoadOptions lo = load_options_for(precision);
  if (tp > 1) lo.shard = {w->rank(), tp};
  if (ep > 1) lo.experts = {w->rank(), ep};
  auto m = load_model(golden(name), lo);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  if (!m.is_ok()) return o;
  o.model = std::move(m).value();
  BackendOptions bo;
  bo.n_threads = 1;  // two ranks on two cores
  o.backend = std::move(open_backend("cpu", bo)).value();
  EngineOptions eo;
  eo.precision = precision;
  eo.kv_dtype = KvDtype::kF32;
  if (tp > 1) eo.tensor_parallel = w;
  if (ep > 1) eo.expert_parallel = w;
  eo.moe_combine = combine;
  auto e = Engine::create(o.model.spec, o.model.weights, *o.backend, eo);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  if (e.is_ok()) o.engine = std::move(e).value();
  return o;
}

Opened open_layout(const std::string& name, const dist::ParallelLayout& layout, ActivationPrecision precision,
                   int micro_batches) {
  Opened o;
  // The world stays owned by test_world(); the groups only borrow it.
  std::shared_ptr<dist::Communicator> world(std::shared_ptr<dist::Communicator>{}, test_world());
  auto groups = dist::make_process_groups(world, layout);
  EXPECT_TRUE(groups.is_ok()) << groups.status().to_string();
  if (!groups.is_ok()) return o;
  o.groups = std::move(groups).value();
  LoadOptions lo = load_options_for(precision);
  lo.shard = {o.groups.coords.tp, layout.tp};
  lo.experts = {o.groups.coords.ep, layout.ep};
  lo.stage = {o.groups.coords.pp, layout.pp};
  auto m = load_model(golden(name), lo);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  if (!m.is_ok()) return o;
  o.model = std::move(m).value();
  BackendOptions bo;
  bo.n_threads = 1;
  o.backend = std::move(open_backend("cpu", bo)).value();
  EngineOptions eo;
  eo.precision = precision;
  eo.kv_dtype = KvDtype::kF32;
  eo.tensor_parallel = o.groups.tp.get();
  eo.expert_parallel = o.groups.ep.get();
  eo.moe_group = o.groups.stage.get();
  eo.pipeline = o.groups.pp.get();
  eo.pipeline_micro_batches = micro_batches;
  auto e = Engine::create(o.model.spec, o.model.weights, *o.backend, eo);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  if (e.is_ok()) o.engine = std::move(e).value();
  return o;
}

}  // namespace day0::testing
