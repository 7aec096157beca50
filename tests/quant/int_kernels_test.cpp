// INT8 / INT4 projections kept quantized for the integer kernels (LoadOptions::int_kernels): what `day0
// quantize` writes binds as INT8 / INT4 views equal, element for element, to the exact float32
// dequantization (the codes go straight across, never through BF16); a run on them agrees with the
// dequantized run within a stated KL and gives the same greedy tokens; a float32 run is untouched.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "day0/align/logit_metrics.h"
#include "day0/backends/backend.h"
#include "day0/core/error.h"
#include "day0/model/catalog.h"
#include "day0/ops/op_names.h"
#include "day0/quant/quantize_checkpoint.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "day0/runtime/op_recording.h"

namespace day0 {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir;
  Scratch() {
    static int counter = 0;
    dir = fs::temp_directory_path() / fmt::format("day0-int-kernels-test-{}-{}", getpid(), counter++);
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

std::string golden(const std::string& name) {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

std::string quantized_llama(const Scratch& s, int bits, int64_t group, bool symmetric) {
  QuantizeOptions o;
  o.bits = bits;
  o.group_size = group;
  o.symmetric = symmetric;
  const std::string out = (s.dir / "q").string();
  auto r = quantize_checkpoint(golden("llama3"), out, o);
  D0_CHECK_MSG(r.is_ok(), r.status().to_string());
  return out;
}

std::vector<const WeightView*> projections(const ModelWeights& w) {
  std::vector<const WeightView*> out;
  for (const LayerWeights& l : w.layers) {
    for (const Linear* p : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.mlp.gate, &l.mlp.up, &l.mlp.down})
      out.push_back(&p->w);
  }
  return out;
}

EngineOptions bf16_options() {
  EngineOptions eo;
  eo.precision = ActivationPrecision::kBF16;
  return eo;
}

FloatMatrix logits_of(const LoadedModel& model, const std::vector<int32_t>& ids, const EngineOptions& eo) {
  auto h = open_engine(model, "cpu", eo, 2);
  D0_CHECK_MSG(h.is_ok(), h.status().to_string());
  KvCache cache = h->engine->new_cache();
  const SequenceStep step{&cache, ids};
  auto logits = h->engine->forward(std::span(&step, 1));
  D0_CHECK_MSG(logits.is_ok(), logits.status().to_string());
  return copy_matrix(*logits);
}

std::vector<GenerationStep> greedy(const LoadedModel& model, const std::vector<int32_t>& prompt,
                                   const EngineOptions& eo) {
  auto h = open_engine(model, "cpu", eo, 2);
  D0_CHECK_MSG(h.is_ok(), h.status().to_string());
  auto g = generate(*h->engine, prompt, 16, SamplingParams{}, 2);
  D0_CHECK_MSG(g.is_ok(), g.status().to_string());
  return g->steps;
}

TEST(IntKernels, BoundViewsEqualTheExactDequantization) {
  struct Case {
    int bits;
    int64_t group;
    bool symmetric;
  };
  for (const Case& c : {Case{8, 64, true}, Case{8, 32, false}, Case{4, 32, true}, Case{4, 64, false}}) {
    Scratch s;
    const std::string dir = quantized_llama(s, c.bits, c.group, c.symmetric);
    auto kept = load_model(dir, load_options_for(ActivationPrecision::kBF16));
    ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
    auto exact = load_model(dir, load_options_for(ActivationPrecision::kF32));
    ASSERT_TRUE(exact.is_ok()) << exact.status().to_string();
    const auto a = projections(*kept->weights);
    const auto b = projections(*exact->weights);
    ASSERT_EQ(a.size(), 14u);
    EXPECT_EQ(kept->weights->int_projections.n, 14);
    EXPECT_EQ(exact->weights->int_projections.n, 0);
    EXPECT_NE(kept->weights->int_projections.label().find(fmt::format("int{} g{}", c.bits, c.group)),
              std::string::npos)
        << kept->weights->int_projections.label();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]->format, c.bits == 8 ? WeightFormat::kInt8 : WeightFormat::kInt4) << a[i]->name;
      EXPECT_EQ(a[i]->group, c.group);
      EXPECT_EQ(a[i]->zeros != nullptr, !c.symmetric) << a[i]->name;
      EXPECT_EQ(b[i]->format, WeightFormat::kF32) << b[i]->name;
      ASSERT_EQ(a[i]->rows, b[i]->rows);
      ASSERT_EQ(a[i]->cols, b[i]->cols);
      int64_t differ = 0;
      for (int64_t r = 0; r < a[i]->rows; ++r) {
        for (int64_t k = 0; k < a[i]->cols; ++k) differ += a[i]->at(r, k) != b[i]->at(r, k);
      }
      EXPECT_EQ(differ, 0) << a[i]->name;
      // INT4 is a quarter of the BF16 bytes plus scales; INT8 half.
      EXPECT_LT(a[i]->data_bytes(), static_cast<uint64_t>(a[i]->rows * a[i]->cols) * (c.bits == 8 ? 2 : 1));
    }
  }
}

// KL(dequantized || integer kernels) of the next-token distributions over 48 positions, both in BF16
// activations. The integer kernels add one error to the dequantized run: each activation block is
// rounded to steps of amax / 127, an error of the same size as int8 weights per group of 32 (step
// amax / 127 there too), which on this sensitive random-weight miniature gave KL ~6e-4 in the quantize
// test; measured here 7.7e-4 for int8 and int4 alike (the same activation error): bound 2e-3. A
// misread layout (nibble order, zero point, scale) gives KL of order 1.
TEST(IntKernels, LogitsAgreeWithTheDequantizedRunAndGreedyLeavesItOnlyAtATie) {
  std::vector<int32_t> ids(48);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % 256);
  for (int bits : {8, 4}) {
    Scratch s;
    const std::string dir = quantized_llama(s, bits, 32, bits == 8);
    auto kept = load_model(dir, load_options_for(ActivationPrecision::kBF16));
    ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
    LoadOptions dequantized;
    dequantized.exact_f32_dequantized = true;
    auto base = load_model(dir, dequantized);
    ASSERT_TRUE(base.is_ok()) << base.status().to_string();
    const FloatMatrix ref = logits_of(*base, ids, bf16_options());
    const FloatMatrix got = logits_of(*kept, ids, bf16_options());
    LogitAccumulator acc;
    const std::vector<int64_t> ids64(ids.begin(), ids.end());
    acc.add_prompt(ref, got, ids64);
    const LogitSummary sum = acc.summary();
    std::printf("int%d g32 integer kernels vs dequantized: KL mean %.3g max %.3g, same top-1 %.3f\n", bits,
                sum.kl_mean, sum.kl_max, sum.same_top1);
    EXPECT_LT(sum.kl_mean, 2e-3);
    EXPECT_GT(sum.kl_mean, 0.0);  // the activations really were quantized
    // Greedy. The random-weight miniature has near-ties (same top-1 at 94% of the positions above), so
    // either width may leave the base path, but only at a tie the integer kernels' own error can flip:
    // its token is the base's runner-up, and the base's top-2 gap is below twice the largest logit
    // change measured above (two logits moving toward each other). Measured: int8 identical over 16
    // steps with the plain amax / 7 scales, one flip at a 0.047-nat gap with the searched scales
    // (max logit change 0.23); int4 at a 0.0000-nat tie.
    const std::vector<int32_t> prompt = {3, 141, 59, 26};
    const auto a = greedy(*kept, prompt, bf16_options());
    const auto b = greedy(*base, prompt, bf16_options());
    ASSERT_EQ(a.size(), b.size());
    size_t first = 0;
    while (first < a.size() && a[first].chosen.token == b[first].chosen.token) ++first;
    if (first < a.size()) {
      ASSERT_EQ(b[first].top.size(), 2u);
      const double gap = b[first].top[0].logprob - b[first].top[1].logprob;
      std::printf(
          "int%d greedy: first divergence at step %zu, base top-2 gap %.4f nats (max logit change %.4f)\n",
          bits, first, gap, sum.max_abs_err);
      EXPECT_EQ(a[first].chosen.token, b[first].top[1].token) << "int" << bits << " step " << first;
      EXPECT_LT(gap, 2 * sum.max_abs_err)
          << "int" << bits << " left the base path at step " << first << " without a tie";
    }
  }
}

// A float32 run never takes the integer path: its logits equal the exact dequantized run's bit for bit.
TEST(IntKernels, Float32RunIsTheExactDequantizedOne) {
  Scratch s;
  const std::string dir = quantized_llama(s, 4, 32, true);
  auto f32 = load_model(dir, load_options_for(ActivationPrecision::kF32));
  ASSERT_TRUE(f32.is_ok());
  EXPECT_EQ(f32->weights->int_projections.n, 0);
  LoadOptions exact;
  exact.exact_f32_dequantized = true;
  auto ref = load_model(dir, exact);
  ASSERT_TRUE(ref.is_ok());
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  const FloatMatrix a = logits_of(*f32, ids, {});
  const FloatMatrix b = logits_of(*ref, ids, {});
  ASSERT_EQ(a.data.size(), b.data.size());
  EXPECT_EQ(std::memcmp(a.data.data(), b.data.data(), a.data.size() * 4), 0);
}

// inspect / coverage / adapt record a quantized checkpoint without its tensors: the dry run must list
// what a BF16 run of the loaded checkpoint calls, INT4 / INT8 matmuls with their group, and cost the
// integer bytes, not the dequantized ones.
TEST(IntKernels, DryOperatorListIsWhatTheBf16RunCalls) {
  auto bf16_dry = record_op_list(resolve_model(golden("llama3")).value().spec, 512);
  ASSERT_TRUE(bf16_dry.is_ok()) << bf16_dry.status().to_string();
  EXPECT_FALSE(bf16_dry->bf16_activations);
  for (const auto& [bits, group, symmetric] :
       {std::tuple{4, int64_t{32}, true}, std::tuple{8, int64_t{64}, false}}) {
    SCOPED_TRACE(fmt::format("int{} g{} {}", bits, group, symmetric ? "sym" : "asym"));
    Scratch s;
    const std::string dir = quantized_llama(s, bits, group, symmetric);
    auto resolved = resolve_model(dir);
    ASSERT_TRUE(resolved.is_ok()) << resolved.status().to_string();
    auto dry = record_op_list(resolved->spec, 512);
    ASSERT_TRUE(dry.is_ok()) << dry.status().to_string();
    EXPECT_TRUE(dry->bf16_activations);

    auto model = load_model(dir, load_options_for(ActivationPrecision::kBF16));
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    BackendOptions bo;
    bo.n_threads = 1;
    auto cpu = open_backend("cpu", bo);
    ASSERT_TRUE(cpu.is_ok());
    auto real = record_op_list(model->spec, model->weights, **cpu, 512, bf16_options());
    ASSERT_TRUE(real.is_ok()) << real.status().to_string();
    ASSERT_EQ(dry->ops.size(), real->ops.size());
    EXPECT_TRUE(dry->ops == real->ops);

    const WeightFormat want = bits == 8 ? WeightFormat::kInt8 : WeightFormat::kInt4;
    int64_t int_matmuls = 0;
    for (const OpSpec& op : dry->ops) {
      if (op.name != op::kMatmul || op.label == "lm_head" || op.label == "embed_tokens") continue;
      EXPECT_EQ(op.weights, want) << op.label;
      EXPECT_EQ(op.attrs.at("group"), fmt::format("{}", group)) << op.label;
      EXPECT_EQ(op.attrs.count("zero_points"), symmetric ? 0u : 1u) << op.label;
      ++int_matmuls;
    }
    EXPECT_EQ(int_matmuls, 7);  // q, k, v, o, gate, up, down (layers merged)
    EXPECT_LT(dry->total_bytes_per_token(), bf16_dry->total_bytes_per_token());
  }
}

}  // namespace
}  // namespace day0
