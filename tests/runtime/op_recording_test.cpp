// The recorded operator list is what runs: for every registered family, a miniature checkpoint with
// random weights is run for real (one prefill and one decode step on the cpu backend) under a counting
// backend that knows nothing of the recorder, and the list recorded there must equal the dry-run list
// (shape-only weights, nothing computed) that coverage and inspect use, entry for entry; the kernels
// the counting backend saw must be exactly the ops of that list and of the coverage report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>
#include <filesystem>
#include <set>

#include "day0/backends/kernel_list.h"
#include "day0/backends/recording_backend.h"
#include "day0/graph/coverage.h"
#include "day0/model/catalog.h"
#include "day0/model/family_registry.h"
#include "day0/ops/op_names.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/op_recording.h"
#include "day0/synth/synth_checkpoint.h"

namespace day0 {
namespace {

using Kernel = std::pair<std::string, WeightFormat>;  // what a call is keyed by

template <typename Args>
WeightFormat format_of(const Args&) {
  return WeightFormat::kF32;
}
WeightFormat format_of(const EmbeddingArgs& a) {
  return a.table.format;
}
WeightFormat format_of(const MatmulArgs& a) {
  return a.w.format;
}
WeightFormat format_of(const MlaArgs& a) {
  return a.w_kv_b.format;
}
WeightFormat format_of(const PagedMlaArgs& a) {
  return a.w_kv_b.format;
}
WeightFormat format_of(const GroupedMatmulArgs& a) {
  return a.w.format;
}
WeightFormat format_of(const MoeExpertsArgs& a) {
  return a.experts.empty() ? WeightFormat::kF32 : a.experts[0].down.format;
}

// Forwards every kernel to the real backend and notes which one ran: independent of the recorder.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Backend& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  bool supports(const OpKey& key) const override { return inner_.supports(key); }
  void synchronize() override { inner_.synchronize(); }
  std::set<Kernel> seen;

#define D0_COUNT(method, Args, op_name)                   \
  void method(const Args& a) override {                   \
    seen.emplace(std::string(op::op_name), format_of(a)); \
    inner_.method(a);                                     \
  }
  D0_FOR_EACH_KERNEL(D0_COUNT)
#undef D0_COUNT

 private:
  Backend& inner_;
};

std::string describe(const OpSpec& op) {
  std::string out = fmt::format("{} [{}] {} calls={} prefill={} decode={} flops={} mm={} bytes={}", op.name,
                                op.label, weight_format_name(op.weights), op.calls_per_token, op.prefill,
                                op.decode, op.flops_per_token, op.matmul_flops_per_token, op.bytes_per_token);
  for (const auto& [k, v] : op.attrs) out += fmt::format(" {}={}", k, v);
  for (const auto& s : op.shapes) out += fmt::format(" [{}]", fmt::join(s, ","));
  return out;
}

// A config of the family to shrink: its golden, else a catalog entry, else (a family with neither) a
// minimal dense config under its own architecture name.
Result<ModelSpec> config_of(const FamilyInfo& family) {
  for (const auto& entry : std::filesystem::directory_iterator(std::string(DAY0_TEST_DATA_DIR) + "/golden")) {
    if (!entry.is_directory() || !std::filesystem::exists(entry.path() / "config.json")) continue;
    auto spec = load_model_config(entry.path() / "config.json");
    if (spec.is_ok() && spec->family == family.name()) return spec;
  }
  for (const auto& entry : model_catalog()) {
    auto spec = catalog_model(entry.name);
    if (spec.is_ok() && spec->family == family.name()) return spec;
  }
  const nlohmann::json minimal = {{"architectures", {family.architectures.front()}},
                                  {"model_type", family.model_types.front()},
                                  {"vocab_size", 256},
                                  {"hidden_size", 64},
                                  {"intermediate_size", 128},
                                  {"num_hidden_layers", 2},
                                  {"num_attention_heads", 4},
                                  {"num_key_value_heads", 2},
                                  {"max_position_embeddings", 512}};
  return parse_model_config(minimal, "minimal " + family.model_types.front() + " config");
}

TEST(RecordedOpList, EqualsTheKernelsARealStepCallsForEveryFamily) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / fmt::format("day0_op_recording_{}", ::getpid());
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  for (const FamilyInfo& family : family_registry()) {
    const std::string name = family.name();
    SCOPED_TRACE(name);
    auto full = config_of(family);
    ASSERT_TRUE(full.is_ok()) << full.status().to_string();
    if (!unimplemented_mechanisms(*full).empty()) {
      // Parsed and counted but not run yet: the recording refuses it by name.
      auto refused = record_op_list(*full, 512);
      ASSERT_FALSE(refused.is_ok());
      EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported) << refused.status().to_string();
      continue;
    }
    SynthOptions synth;
    synth.n_shards = 1;
    synth.mtp_layers = false;
    auto written = synthesize_miniature(*full, MiniatureOptions{}, synth, (root / name).string());
    ASSERT_TRUE(written.is_ok()) << written.status().to_string();
    auto model = load_model(written->dir);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();

    BackendOptions options;
    options.n_threads = 1;
    auto cpu = open_backend("cpu", options);
    ASSERT_TRUE(cpu.is_ok());
    CountingBackend counting(**cpu);
    auto real = record_op_list(model->spec, model->weights, counting, 512);
    ASSERT_TRUE(real.is_ok()) << real.status().to_string();
    auto dry = record_op_list(model->spec, 512);
    ASSERT_TRUE(dry.is_ok()) << dry.status().to_string();

    // The dry run records exactly what the real run did, figures included.
    ASSERT_EQ(dry->ops.size(), real->ops.size());
    for (size_t i = 0; i < dry->ops.size(); ++i) EXPECT_EQ(describe(dry->ops[i]), describe(real->ops[i]));
    EXPECT_TRUE(dry->ops == real->ops);

    // The list names exactly the kernels the real backend was asked to run, and so does coverage.
    std::set<Kernel> listed, covered;
    for (const OpSpec& op : dry->ops) listed.emplace(op.name, op.weights);
    auto report = compute_coverage(name, *dry, "cpu", options);
    ASSERT_TRUE(report.is_ok()) << report.status().to_string();
    for (const CoverageRow& row : report->rows) covered.emplace(row.op.name, row.key.weights);
    EXPECT_EQ(listed, counting.seen);
    EXPECT_EQ(covered, counting.seen);
    EXPECT_FALSE(report->failed());

    // A decode step calls the LM head and picks a token; both steps run attention on pages (shared
    // key = value attention gathers each row's window and entries, then attends to them).
    bool lm_head = false, argmax = false, attention = false;
    const bool gathered = model->spec.shared_kv_low_rank.has_value();
    for (const OpSpec& op : dry->ops) {
      lm_head = lm_head || (op.name == op::kMatmul && op.decode && op.shapes[0][0] == model->spec.vocab_size);
      argmax = argmax || (op.name == op::kArgmax && op.decode && op.calls_per_token == 1);
      const bool attends = op.name == op::kPagedAttention || op.name == op::kPagedMlaAttention ||
                           (gathered && op.name == op::kAttention);
      attention = attention || (attends && op.prefill && op.calls_per_token > 0);
    }
    EXPECT_TRUE(lm_head);
    EXPECT_TRUE(argmax);
    EXPECT_TRUE(attention || model->spec.attention == AttentionKind::kMla);
  }
  std::filesystem::remove_all(root);
}

TEST(RecordedOpList, WeightLabelsDropLayerAndExpertIndices) {
  EXPECT_EQ(weight_label("model.layers.3.self_attn.q_proj.weight"), "self_attn.q_proj");
  EXPECT_EQ(weight_label("model.layers.12.mlp.experts.17.down_proj.weight"), "mlp.experts.*.down_proj");
  EXPECT_EQ(weight_label("language_model.model.layers.0.feed_forward.router.weight"), "feed_forward.router");
  EXPECT_EQ(weight_label("model.embed_tokens.weight"), "embed_tokens");
  EXPECT_EQ(weight_label("lm_head.weight"), "lm_head");
  EXPECT_EQ(weight_label("model.layers.1.mlp.experts.gate_up_proj"), "mlp.experts.gate_up_proj");
}

// Record-only mode computes nothing: outputs stay as the caller left them and token pickers give 0.
TEST(RecordedOpList, RecordOnlyBackendComputesNothing) {
  RecordingBackend recorder(nullptr);
  std::vector<float> x = {1, 2, 3, 4}, y(4, 7.0f);
  recorder.add({ConstMatrix(x.data(), 1, 4), ConstMatrix(x.data(), 1, 4), Matrix(y.data(), 1, 4)});
  EXPECT_EQ(y, std::vector<float>(4, 7.0f));
  int32_t token = -1;
  recorder.argmax({ConstMatrix(x.data(), 1, 4), std::span<int32_t>(&token, 1)});
  EXPECT_EQ(token, 0);
  ASSERT_EQ(recorder.calls().size(), 2u);
  EXPECT_EQ(recorder.calls()[0].op.name, op::kAdd);
  EXPECT_EQ(recorder.calls()[1].op.name, op::kArgmax);
}

}  // namespace
}  // namespace day0
