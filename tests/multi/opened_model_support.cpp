#include "opened_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "day0/runtime/generate.h"
#include "world.h"

namespace day0::testing {

std::string golden(const std::string& name) {
  if (name.starts_with("/")) return name;  // a checkpoint the test wrote itself
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

Opened open_model(const std::string& name, int tp, int ep, MoeCombine combine, ActivationPrecision precision,
                  bool dp_attention) {
  Opened o;
  LoadOptions lo = load_options_for(precision);
  if (tp * ep > 1) {
    auto groups = dist::make_process_groups(shared_test_world(), {.tp = tp, .pp = 1, .ep = ep});
    EXPECT_TRUE(groups.is_ok()) << groups.status().to_string();
    if (!groups.is_ok()) return o;
    o.groups = std::move(groups).value();
    lo.shard = {o.groups.coords.tp, tp};
    lo.experts = {o.groups.coords.ep, ep};
  }
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
  if (tp > 1) eo.tensor_parallel = o.groups.tp.get();
  if (ep > 1) eo.expert_parallel = o.groups.ep.get();
  if (tp * ep > 1) eo.moe_group = o.groups.stage.get();
  eo.moe_combine = combine;
  eo.data_parallel_attention = dp_attention;
  auto e = Engine::create(o.model.spec, o.model.weights, *o.backend, eo);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  if (e.is_ok()) o.engine = std::move(e).value();
  return o;
}

LogitDiff compare_logits(Opened& whole, Opened& part, const std::vector<int32_t>& prompt) {
  LogitDiff d;
  KvCache whole_cache = whole.engine->new_cache(), part_cache = part.engine->new_cache();
  const SequenceStep ws{&whole_cache, prompt}, ps{&part_cache, prompt};
  auto wl = whole.engine->forward(std::span(&ws, 1));
  EXPECT_TRUE(wl.is_ok()) << wl.status().to_string();
  if (!wl.is_ok()) return {1e30, 0};
  const FloatMatrix expected = copy_matrix(*wl);  // [n, vocab]
  auto pl = part.engine->forward(std::span(&ps, 1));
  EXPECT_TRUE(pl.is_ok()) << pl.status().to_string();
  if (!pl.is_ok() || pl->rows != expected.rows || pl->cols != expected.cols) return {1e30, 0};
  for (int64_t r = 0; r < expected.rows; ++r) {
    for (int64_t j = 0; j < expected.cols; ++j) {
      d.max_diff = std::max(d.max_diff, static_cast<double>(std::fabs(pl->row(r)[j] - expected.row(r)[j])));
      d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(expected.row(r)[j])));
    }
  }
  return d;
}

void expect_same_greedy_tokens(Opened& whole, Opened& part) {
  const std::vector<int32_t> prompt = {5, 9, 77, 180, 33, 2};
  const SamplingParams greedy;
  auto wg = generate(*whole.engine, prompt, 12, greedy);
  auto pg = generate(*part.engine, prompt, 12, greedy);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok());
  EXPECT_EQ(pg->tokens(), wg->tokens());
}

Opened open_layout(const std::string& name, const dist::ParallelLayout& layout, ActivationPrecision precision,
                   int micro_batches) {
  Opened o;
  auto groups = dist::make_process_groups(shared_test_world(), layout);
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
