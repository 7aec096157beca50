// Every catalog entry's figures — inspect's parameter and KV counts, the recorded operator list that
// coverage reads, and the planner's model cost — against the figures recorded in
// tests/data/catalog_figures.json. The forward pass, the family files and the planner are being
// reorganised (families as recipes); this keeps the numbers a user sees fixed while the code moves.
// A change that is meant to move a figure re-records the file (DAY0_RECORD_CATALOG_FIGURES=1, then
// review the diff) and says why in its commit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/model/attention_cost.h"
#include "day0/model/catalog.h"
#include "day0/model/model_memory.h"
#include "day0/model/param_count.h"
#include "day0/plan/model_cost_adapter.h"
#include "day0/runtime/op_recording.h"

namespace day0 {
namespace {

std::string figures_path() {
  return std::string(DAY0_TEST_DATA_DIR) + "/data/catalog_figures.json";
}

// The figures of one entry as flat "name": number pairs, so a difference names the figure.
nlohmann::json entry_figures(const CatalogEntry& entry) {
  nlohmann::json out = nlohmann::json::object();
  auto spec = catalog_model(entry.name);
  EXPECT_TRUE(spec.is_ok()) << entry.name << ": " << spec.status().to_string();
  if (!spec.is_ok()) return out;
  auto counts = count_params(*spec);
  EXPECT_TRUE(counts.is_ok()) << entry.name << ": " << counts.status().to_string();
  if (counts.is_ok()) {
    out["params.total"] = counts->total;
    out["params.active"] = counts->active;
    out["params.active_min"] = counts->active_min;
    out["params.attention"] = counts->attention;
    out["params.norms"] = counts->norms;
    out["params.dense_mlp"] = counts->dense_mlp;
    out["params.router"] = counts->router;
    out["params.routed_experts"] = counts->routed_experts;
    out["params.shared_experts"] = counts->shared_experts;
    out["params.stored_bytes"] = counts->stored_bytes;
  }
  const KvCacheSummary kv = kv_cache_summary(*spec, KvDtype::kBF16);
  out["kv.bytes_per_token"] = kv.bytes_per_token;
  out["kv.bytes_per_1k_tokens"] = kv.bytes_per_1k_tokens;
  out["kv.state_bytes_per_sequence"] = kv.state_bytes_per_sequence;
  out["kv.bounded_layers"] = kv.bounded_layers;
  // A model the engine does not run yet has no operator list: the count of its missing mechanisms stands in.
  const std::vector<std::string> unimplemented = unimplemented_mechanisms(*spec);
  if (!unimplemented.empty()) out["ops.unimplemented_mechanisms"] = unimplemented.size();
  auto ops = unimplemented.empty() ? record_op_list(*spec) : Result<OpList>(OpList{});
  EXPECT_TRUE(ops.is_ok()) << entry.name << ": " << ops.status().to_string();
  if (ops.is_ok()) {
    // Ops merge across layers by name, label and attributes: one row each, in call order.
    for (size_t i = 0; i < ops->ops.size(); ++i) {
      const OpSpec& op = ops->ops[i];
      std::string attrs;
      for (const auto& [k, v] : op.attrs) attrs += fmt::format(",{}={}", k, v);
      const std::string key = fmt::format("op.{:02}.{}[{}{}]", i, op.name, op.label, attrs);
      out[key + ".calls"] = op.calls_per_token;
      out[key + ".flops"] = op.flops_per_token;
      out[key + ".bytes"] = op.bytes_per_token;
      out[key + ".prefill"] = op.prefill;
      out[key + ".decode"] = op.decode;
    }
  }
  auto cost = plan::load_model_cost(entry.name);
  EXPECT_TRUE(cost.is_ok()) << entry.name << ": " << cost.status().to_string();
  if (cost.is_ok()) {
    out["plan.total_params"] = cost->total_params();
    out["plan.active_params"] = cost->active_params_per_token();
    out["plan.kv_bytes_per_token.bf16"] = cost->kv_bytes_per_token(KvDtype::kBF16);
    out["plan.state_bytes_per_sequence"] = cost->state_bytes_per_sequence();
    double decode = 0, prefill = 0, index = 0, attended = 0, stored = 0;
    RowKeys keys;  // summed over the layers, a row at the recorded context
    for (const plan::LayerCost& l : cost->layers) {
      decode += l.attn_flops_per_pair_decode;
      prefill += l.attn_flops_per_pair_prefill;
      index += l.index_flops_per_pair;
      attended += static_cast<double>(l.reach.selected) + static_cast<double>(l.kv_window);
      const RowKeys row = row_keys(l.reach, kDefaultOpContext);
      keys.attended += row.attended;
      keys.indexed += row.indexed;
      for (double b : l.checkpoint_bytes) stored += b;
    }
    out["plan.row_keys.attended"] = keys.attended;
    out["plan.row_keys.indexed"] = keys.indexed;
    out["plan.attn_flops_per_pair.decode"] = decode;
    out["plan.attn_flops_per_pair.prefill"] = prefill;
    out["plan.index_flops_per_pair"] = index;
    out["plan.attended_keys_and_windows"] = attended;
    out["plan.layer_checkpoint_bytes"] = stored;
  }
  return out;
}

bool same_figure(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return std::abs(x - y) <= 1e-9 * std::max(std::abs(x), std::abs(y));
  }
  return a == b;
}

TEST(CatalogFigures, EveryEntryMatchesTheRecordedFigures) {
  nlohmann::json now = nlohmann::json::object();
  for (const CatalogEntry& entry : model_catalog()) now[entry.name] = entry_figures(entry);
  if (const char* record = std::getenv("DAY0_RECORD_CATALOG_FIGURES"); record && std::string(record) == "1") {
    std::ofstream(figures_path()) << now.dump(1) << "\n";
    GTEST_SKIP() << "recorded " << figures_path();
  }
  std::ifstream in(figures_path());
  ASSERT_TRUE(in) << "cannot read " << figures_path();
  const nlohmann::json recorded = nlohmann::json::parse(in);
  for (const auto& [name, figures] : now.items()) {
    if (!recorded.contains(name)) {
      ADD_FAILURE() << name << ": a catalog entry with no recorded figures (record them with "
                    << "DAY0_RECORD_CATALOG_FIGURES=1 and review the new entry's numbers)";
      continue;
    }
    const nlohmann::json& before = recorded.at(name);
    for (const auto& [key, value] : figures.items()) {
      if (!before.contains(key)) {
        ADD_FAILURE() << name << ": " << key << " = " << value.dump() << " is new";
      } else if (!same_figure(before.at(key), value)) {
        ADD_FAILURE() << name << ": " << key << " was " << before.at(key).dump() << ", now " << value.dump();
      }
    }
    for (const auto& [key, value] : before.items())
      if (!figures.contains(key))
        ADD_FAILURE() << name << ": " << key << " (was " << value.dump() << ") is gone";
  }
  for (const auto& [name, figures] : recorded.items())
    if (!now.contains(name)) ADD_FAILURE() << name << ": recorded but no longer in the catalog";
}

}  // namespace
}  // namespace day0
