// DeepSeek-V4 in the formats its release ships (tests/golden/deepseek-v4-fp4,
// tools/reference/make_golden.py): routed experts FP4 e2m1 with a ue8m0 scale per 32 input columns, the
// weight table's projections FP8 e4m3 in 32x32 blocks with ue8m0 scales, expert_dtype beside
// quantization_config. transformers' reference was dumped from the dequantized weights (exact in BF16), so
// what is measured is the engine's decode of the formats and its DeepSeek-V4 blocks, not quantization error.
// The generic golden tests (golden_test.cpp, golden_manifest_test.cpp) run on it too; this one pins what
// makes it this golden.
#include <gtest/gtest.h>

#include <memory>

#include "day0/align/align_runner.h"
#include "day0/model/catalog.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/model_weights.h"
#include "day0/runtime/tensor_source.h"
#include "golden.h"

namespace day0::testing {
namespace {

constexpr const char* kGolden = "deepseek-v4-fp4";

// The golden's spec, and an F32 engine over its weights bound directly (not through load_model, which
// refuses a family while unimplemented_mechanisms() names any of its mechanisms).
struct BoundGolden {
  ModelSpec spec;
  ReferenceDump reference;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Engine> engine;
};

Result<BoundGolden> bind_golden() {
  BoundGolden g;
  D0_ASSIGN_OR_RETURN(auto resolved, resolve_model(golden_dir(kGolden)));
  g.spec = resolved.spec;
  D0_ASSIGN_OR_RETURN(auto source, open_checkpoint_source(resolved.folder.string(), {}));
  D0_ASSIGN_OR_RETURN(auto weights,
                      bind_model_weights(g.spec, std::shared_ptr<const TensorSource>(std::move(source))));
  D0_ASSIGN_OR_RETURN(g.reference, read_reference_dump(golden_dir(kGolden) + "/reference.safetensors"));
  D0_ASSIGN_OR_RETURN(g.backend, open_backend("cpu", BackendOptions{.n_threads = 2}));
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  D0_ASSIGN_OR_RETURN(g.engine, Engine::create(g.spec, weights, *g.backend, exact));
  return g;
}

// The config reads as the release's formats: FP8 in 32x32 blocks with E8M0 scales, FP4 experts.
TEST(DeepseekV4Fp4Golden, ConfigReadsAsTheReleaseFormats) {
  auto resolved = resolve_model(golden_dir(kGolden));
  ASSERT_TRUE(resolved.is_ok()) << resolved.status().to_string();
  const ModelSpec& spec = resolved->spec;
  const QuantSpec& q = spec.weights;
  EXPECT_EQ(q.format, WeightFormat::kFp8Block);
  EXPECT_EQ(q.block_rows, 32);
  EXPECT_EQ(q.block_cols, 32);
  EXPECT_EQ(q.fp8_scale_dtype(), DType::kF8E8M0);
  EXPECT_EQ(q.fp4_expert_group, 32);  // from the top-level expert_dtype
  auto manifest = build_tensor_manifest(spec);
  ASSERT_TRUE(manifest.is_ok()) << manifest.status().to_string();
  int fp4 = 0, fp8 = 0;
  for (const TensorSpec& t : manifest->tensors) {
    if (t.dtype == DType::kI8 && t.expert >= 0) {
      EXPECT_EQ(t.params, 2 * static_cast<int64_t>(t.bytes)) << t.name;  // two e2m1 codes a byte
      ++fp4;
    }
    fp8 += t.dtype == DType::kF8E4M3 ? 1 : 0;
  }
  // 4 layers x 8 experts x (w1, w2, w3); FP8: 5 attention projections a layer, the indexer's query on the
  // 2 compressed sparse layers, the shared expert's 3.
  EXPECT_EQ(fp4, 4 * 8 * 3);
  EXPECT_EQ(fp8, 4 * 5 + 2 + 4 * 3);
}

// F32 activations and KV: logits within 1e-5 of their range, the same top-1 everywhere, greedy identical.
// The prompts were chosen without an indexer tie, so every row and step is compared.
TEST(DeepseekV4Fp4Golden, F32AlignsWithTransformersOnTheDequantizedWeights) {
  auto run = bind_golden();
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  auto mine = run_reference_prompts(*run->engine, run->reference, "test");
  ASSERT_TRUE(mine.is_ok()) << mine.status().to_string();
  const AlignReport r = compare_dumps(run->reference, *mine, default_thresholds(ActivationPrecision::kF32));
  EXPECT_TRUE(r.pass()) << align_report_text(r);
  EXPECT_TRUE(r.tie_cuts.empty()) << align_report_text(r);
  EXPECT_LE(r.logits.max_abs_err, 1e-5 * r.logits.logit_range) << align_report_text(r);
  EXPECT_DOUBLE_EQ(r.logits.same_top1, 1.0);
  ASSERT_EQ(r.greedy.size(), run->reference.prompts.size());
  for (const GreedyCheck& g : r.greedy) EXPECT_EQ(g.first_divergence, -1) << align_report_text(r);
}

}  // namespace
}  // namespace day0::testing
