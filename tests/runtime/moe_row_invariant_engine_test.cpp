// Batched speculative verification on MoE goldens (serve: several sequences' drafts in one row-invariant
// step): an expert can get more tokens than the cpu backend's experts take on row dots (16), and every
// row's logits must still be, bit for bit, those of feeding its sequence one token at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "day0/backends/cpu/simd_level.h"
#include "day0/runtime/speculative.h"
#include "golden.h"

namespace day0::testing {
namespace {

class MoeRowInvariantBatch : public ::testing::TestWithParam<const char*> {};

// kSequences sequences (their own prompts, prefilled) verify kMaxSpecTokens + 1 rows each in one
// row-invariant step. The step's picks (Engine::expert_picks) must give some expert more than 16 tokens in
// some layer, and each row must equal its sequence's one-token step, at every SIMD level here, with F32
// and BF16 activations.
TEST_P(MoeRowInvariantBatch, AStepOfSeveralSequencesGivesEachRowItsOneTokenLogits) {
  constexpr int64_t kSequences = 4, kRows = kMaxSpecTokens + 1;
  auto run = open_golden(GetParam(), "cpu");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const auto vocab = static_cast<int32_t>(run->model.spec.vocab_size);
  std::vector<std::vector<int32_t>> prompts, fed;  // [kSequences][8], [kSequences][kRows]
  for (int64_t s = 0; s < kSequences; ++s) {
    prompts.emplace_back();
    fed.emplace_back();
    for (int64_t i = 0; i < 8; ++i)
      prompts.back().push_back(static_cast<int32_t>((i * 37 + s * 61 + 11) % vocab));
    for (int64_t i = 0; i < kRows; ++i)
      fed.back().push_back(static_cast<int32_t>((i * 53 + s * 29 + 7) % vocab));
  }
  for (SimdLevel level : available_simd_levels()) {
    BackendOptions backend_options;
    backend_options.simd = level;
    auto backend = make_backend("cpu", backend_options);
    ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
    for (ActivationPrecision precision : {ActivationPrecision::kF32, ActivationPrecision::kBF16}) {
      EngineOptions options;
      options.precision = precision;
      options.count_expert_picks = true;
      auto engine = Engine::create(run->model.spec, run->model.weights, **backend, options);
      ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
      const std::string what = fmt::format("{} {}", simd_level_name(level),
                                           precision == ActivationPrecision::kBF16 ? "bf16" : "f32");
      std::vector<KvCache> caches;
      const auto prefill_all = [&] {
        caches.clear();
        caches.reserve(kSequences);
        for (int64_t s = 0; s < kSequences; ++s) {
          caches.push_back((*engine)->new_cache());
          const SequenceStep prefill{&caches.back(), prompts[static_cast<size_t>(s)]};
          EXPECT_TRUE((*engine)->forward(std::span(&prefill, 1), true).is_ok());
        }
      };
      // [kSequences][kRows] one-token steps' logits, sequence by sequence.
      std::vector<std::vector<FloatMatrix>> one_by_one(kSequences);
      prefill_all();
      for (int64_t s = 0; s < kSequences; ++s) {
        for (int64_t i = 0; i < kRows; ++i) {
          const SequenceStep step{
              &caches[static_cast<size_t>(s)],
              std::span<const int32_t>(fed[static_cast<size_t>(s)]).subspan(static_cast<size_t>(i), 1)};
          auto logits = (*engine)->forward(std::span(&step, 1));
          ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
          one_by_one[static_cast<size_t>(s)].push_back(copy_matrix(*logits));
        }
      }
      prefill_all();
      std::vector<SequenceStep> batch;
      for (int64_t s = 0; s < kSequences; ++s)
        batch.push_back({&caches[static_cast<size_t>(s)], fed[static_cast<size_t>(s)]});
      const std::vector<std::vector<int64_t>> before = (*engine)->expert_picks().routed;
      (*engine)->set_row_invariant(true);
      auto logits = (*engine)->forward(batch);  // [kSequences * kRows, vocab]
      (*engine)->set_row_invariant(false);
      ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
      // The most tokens one expert got in the step, over the layers.
      const std::vector<std::vector<int64_t>>& after = (*engine)->expert_picks().routed;
      int64_t busiest = 0;
      for (size_t l = 0; l < after.size(); ++l)
        for (size_t e = 0; e < after[l].size(); ++e)
          busiest =
              std::max(busiest, after[l][e] - (l < before.size() && e < before[l].size() ? before[l][e] : 0));
      EXPECT_GT(busiest, 16) << what << ": no expert past the row-dot limit";
      for (int64_t s = 0; s < kSequences; ++s) {
        for (int64_t i = 0; i < kRows; ++i) {
          const auto& expected = one_by_one[static_cast<size_t>(s)][static_cast<size_t>(i)].data;
          ASSERT_EQ(std::memcmp(logits->row(s * kRows + i), expected.data(), expected.size() * sizeof(float)),
                    0)
              << what << ": sequence " << s << " row " << i << " of a step of " << kSequences << " x "
              << kRows;
        }
      }
    }
  }
}

std::string golden_test_name(const ::testing::TestParamInfo<const char*>& param) {
  std::string name = param.param;
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
  return name;
}
INSTANTIATE_TEST_SUITE_P(Goldens, MoeRowInvariantBatch,
                         ::testing::Values("mixtral", "qwen3-moe", "gpt-oss", "llama4-text", "deepseek-v4",
                                           "deepseek-v4-fp4"),
                         golden_test_name);

}  // namespace
}  // namespace day0::testing
