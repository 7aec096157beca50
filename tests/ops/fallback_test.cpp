// Fallback resolution: native -> decomposed -> host, strict mode, and every decomposition against the
// fused reference kernel.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "day0/backends/cpu/cpu_backend.h"
#include "day0/core/error.h"
#include "day0/graph/decompositions.h"
#include "day0/graph/resolver.h"
#include "day0/ops/op_names.h"
#include "day0/ops/op_schema.h"
#include "differential_harness.h"

namespace day0::test {
namespace {

std::unique_ptr<Backend> raw(std::string_view name) {
  BackendOptions o;
  o.n_threads = 1;
  return std::move(make_backend(name, o).value());
}

TEST(Resolver, PlacementsOnThePartialBackend) {
  auto partial = raw("partial");
  auto host = raw("cpu");
  auto place = [&](std::string_view op, WeightFormat f = WeightFormat::kF32) {
    return resolve_op(*partial, host.get(), {op, f});
  };
  EXPECT_EQ(place(op::kMatmul, WeightFormat::kBF16).placement, Placement::kNative);
  const auto swiglu = place(op::kSwiglu);
  EXPECT_EQ(swiglu.placement, Placement::kDecomposed);
  EXPECT_THAT(swiglu.pieces, ::testing::UnorderedElementsAre("silu", "mul"));
  EXPECT_EQ(place(op::kRmsNorm).placement, Placement::kDecomposed);
  // moe_experts decomposes while its matmuls are native...
  const auto moe = place(op::kMoeExperts, WeightFormat::kFp8Block);
  EXPECT_EQ(moe.placement, Placement::kDecomposed);
  EXPECT_THAT(moe.pieces, ::testing::Contains("matmul"));
  // ...swiglu inside it decomposes again (repeat until stable): only native pieces remain.
  EXPECT_THAT(moe.pieces, ::testing::Not(::testing::Contains("swiglu")));
  // ...but not when the MXFP4 matmul itself is hidden: then the whole op runs on the host.
  EXPECT_EQ(place(op::kMoeExperts, WeightFormat::kMxfp4).placement, Placement::kHostFallback);
  EXPECT_EQ(place(op::kMoeRouter).placement, Placement::kHostFallback);  // no decomposition
  EXPECT_EQ(resolve_op(*partial, nullptr, {op::kMoeRouter}).placement, Placement::kMissing);
  EXPECT_EQ(place("conv2d").placement, Placement::kMissing);
  EXPECT_TRUE(partial->supports({op::kMatmul, WeightFormat::kBF16}));
  EXPECT_FALSE(partial->supports({op::kMatmul, WeightFormat::kMxfp4}));
}

TEST(Resolver, HostFallbackWarnsOnceAndStrictModeRefuses) {
  BackendOptions opts;
  opts.n_threads = 1;
  auto lenient = open_backend("partial", opts).value();
  const float logits[] = {1, 3, 2};
  int32_t id = -1;
  float w = 0;
  MoeRouterArgs args{.logits = {logits, 1, 3}, .expert_ids = {&id, 1, 1}, .expert_weights = {&w, 1, 1}};
  ::testing::internal::CaptureStderr();
  lenient->moe_router(args);
  lenient->moe_router(args);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(id, 1);
  EXPECT_THAT(err, ::testing::HasSubstr("op 'moe_router'"));
  EXPECT_THAT(err, ::testing::HasSubstr("host backend 'cpu'"));
  EXPECT_EQ(err.find("moe_router"), err.rfind("moe_router"));  // warned once

  opts.strict_ops = true;
  auto strict = open_backend("partial", opts).value();
  EXPECT_FALSE(strict->supports({op::kMoeRouter}));
  EXPECT_TRUE(strict->supports({op::kSwiglu}));  // decomposition is not a fallback
  EXPECT_THROW(strict->moe_router(args), InternalError);
  auto* resolving = dynamic_cast<ResolvingBackend*>(strict.get());
  ASSERT_NE(resolving, nullptr);
  const Status st = resolving->check_strict({{op::kSwiglu}, {op::kMoeRouter}});
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("moe_router"));
  EXPECT_TRUE(resolving->check_strict({{op::kSwiglu}, {op::kMatmul, WeightFormat::kBF16}}).is_ok());
}

TEST(Resolver, RawBackendRefusesHiddenKernelCalls) {
  // The partial backend hides kernels by supports() only; the resolver is what routes around them.
  auto partial = raw("partial");
  EXPECT_FALSE(partial->supports({op::kSwiglu}));
  EXPECT_TRUE(raw("reference")->supports({op::kSwiglu}));
  EXPECT_FALSE(raw("reference")->supports({"conv2d"}));
  EXPECT_FALSE(make_backend("tpu").is_ok());
}

// Every decomposition, run on the reference backend's primitives, against the fused reference.
TEST(Decompositions, MatchTheFusedReference) {
  auto ref = reference_backend();
  CaseTable table;
  auto compare = [&](const std::string& op, GuardedMatrix& fused, GuardedMatrix& decomposed, double tol) {
    table.add(op, "decomposed", "", nmse(decomposed.values(), fused.values()), tol,
              decomposed.guards_intact());
  };
  GuardedMatrix x(5, 67);
  x.fill_random(1, 3.0f);
  const auto w = random_vector(67, 2);
  const auto b = random_vector(67, 3);
  {
    GuardedMatrix f(5, 67), d(5, 67);
    ref->rms_norm({x.cview(), w, 1e-6f, f.view()});
    decompose_rms_norm(*ref, {x.cview(), w, 1e-6f, d.view()});
    compare("rms_norm", f, d, kTolFloat);
  }
  {
    GuardedMatrix f(5, 67), d(5, 67);
    ref->layer_norm({x.cview(), w, b, 1e-5f, f.view()});
    decompose_layer_norm(*ref, {x.cview(), w, b, 1e-5f, d.view()});
    compare("layer_norm", f, d, kTolFloat);
  }
  {  // hyper-connections: 4 streams of 67 columns over the 5 rows of x as the layer output
    GuardedMatrix streams(5, 4 * 67), pre(5, 4), post(5, 4), comb(5, 16);
    streams.fill_random(21);
    pre.fill_random(22);
    post.fill_random(23);
    comb.fill_random(24);
    GuardedMatrix fc(5, 67), dc(5, 67);
    const HcCollapseArgs collapse{.streams = streams.cview(), .pre = pre.cview(), .n_streams = 4};
    HcCollapseArgs a = collapse;
    a.out = fc.view();
    ref->hc_collapse(a);
    a.out = dc.view();
    decompose_hc_collapse(*ref, a);
    compare("hc_collapse", fc, dc, kTolFloat);
    for (bool bf16 : {false, true}) {
      GuardedMatrix fe(5, 4 * 67), de(5, 4 * 67);
      HcExpandArgs e{.x = x.cview(),
                     .streams = streams.cview(),
                     .post = post.cview(),
                     .comb = comb.cview(),
                     .n_streams = 4,
                     .bf16_steps = bf16};
      e.out = fe.view();
      ref->hc_expand(e);
      e.out = de.view();
      decompose_hc_expand(*ref, e);
      compare(bf16 ? "hc_expand bf16 steps" : "hc_expand", fe, de, bf16 ? kTolBf16Activations : kTolFloat);
    }
  }
  {  // grouped_matmul: 67 columns would not split; 3 groups of 22 of the first 66
    const TestWeight gw = random_weight(WeightFormat::kBF16, 3 * 8, 22, 25);
    GuardedMatrix f(5, 24), d(5, 24);
    GroupedMatmulArgs a{.x = x.cview().col_slice(0, 66), .w = gw.view(), .groups = 3};
    a.y = f.view();
    ref->grouped_matmul(a);
    a.y = d.view();
    decompose_grouped_matmul(*ref, a);
    compare("grouped_matmul", f, d, kTolFloat);
  }
  {
    GuardedMatrix z(5, 67), f(5, 67), d(5, 67);
    z.fill_random(13, 3.0f);
    ref->gated_rms_norm({x.cview(), z.cview(), w, 1e-6f, f.view()});
    decompose_gated_rms_norm(*ref, {x.cview(), z.cview(), w, 1e-6f, d.view()});
    compare("gated_rms_norm", f, d, kTolFloat);
  }
  GuardedMatrix gate(5, 67), up(5, 67), fused_gu(5, 134);
  gate.fill_random(4, 5.0f);
  up.fill_random(5, 5.0f);
  fused_gu.fill_random(6, 5.0f);
  for (bool interleaved : {false, true}) {
    SwigluArgs a{
        .gate = interleaved ? fused_gu.cview() : gate.cview(), .up = up.cview(), .interleaved = interleaved};
    GuardedMatrix f(5, 67), d(5, 67);
    a.out = f.view();
    ref->swiglu(a);
    a.out = d.view();
    decompose_swiglu(*ref, a);
    compare("swiglu", f, d, kTolFloat);
    GuardedMatrix fc(5, 67), dc(5, 67);
    a.out = fc.view();
    ref->swiglu_clamped(a);
    a.out = dc.view();
    decompose_swiglu_clamped(*ref, a);
    compare("swiglu_clamped", fc, dc, kTolFloat);
    SwigluArgs plain_clamp = a;  // DeepSeek-V4's: silu(min(gate, 2)) * clamp(up, -2, 2)
    plain_clamp.limit = 2.0f, plain_clamp.alpha = 1.0f, plain_clamp.up_shift = 0.0f;
    plain_clamp.out = fc.view();
    ref->swiglu_clamped(plain_clamp);
    plain_clamp.out = dc.view();
    decompose_swiglu_clamped(*ref, plain_clamp);
    compare("swiglu_clamped (no up shift)", fc, dc, kTolFloat);
  }
  {
    const int64_t n_heads = 3, d_nope = 8, d_rope = 4, d_v = 6, rank = 32, t = 3, s = 10;
    const TestWeight wkv = random_weight(WeightFormat::kFp8Block, n_heads * (d_nope + d_v), rank, 7);
    GuardedMatrix q(t, n_heads * (d_nope + d_rope)), c_kv(s, rank), k_pe(s, d_rope);
    q.fill_random(8);
    c_kv.fill_random(9);
    k_pe.fill_random(10);
    GuardedMatrix f(t, n_heads * d_v), d(t, n_heads * d_v);
    MlaArgs a{.q = q.cview(),
              .c_kv = c_kv.cview(),
              .k_pe = k_pe.cview(),
              .w_kv_b = wkv.view(),
              .n_heads = n_heads,
              .d_nope = d_nope,
              .d_rope = d_rope,
              .d_v = d_v,
              .kv_lora_rank = rank,
              .q_pos0 = 7,
              .scale = 0.25f};
    a.out = f.view();
    ref->mla_attention(a);
    a.out = d.view();
    decompose_mla_attention(*ref, a);
    compare("mla_attention", f, d, kTolFloat);
  }
  for (bool clamped : {false, true}) {
    const int64_t n_exp = 6, h = 32, inter = 32, t = 4, k = 2;
    std::vector<TestWeight> store;
    std::vector<ExpertWeights> experts(n_exp);
    store.reserve(3 * n_exp);
    for (int64_t e = 0; e < n_exp; ++e) {
      store.push_back(random_weight(WeightFormat::kMxfp4, 2 * inter, h, 20 + e, 0.3f));
      experts[e].gate = store.back().view();
      store.push_back(random_weight(WeightFormat::kMxfp4, h, inter, 40 + e, 0.3f));
      experts[e].down = store.back().view();
    }
    const std::vector<int32_t> ids = {0, 5, 5, 1, 0, 1, 5, 0};  // experts 2, 3, 4 get no token
    const auto wts = random_vector(t * k, 11);
    GuardedMatrix xin(t, h);
    xin.fill_random(12);
    MoeExpertsArgs a{.x = xin.cview(),
                     .expert_ids = {ids.data(), t, k},
                     .expert_weights = {wts.data(), t, k},
                     .experts = experts,
                     .layout = GateUpLayout::kInterleaved,
                     .clamped = clamped};
    GuardedMatrix f(t, h), d(t, h);
    a.out = f.view();
    ref->moe_experts(a);
    a.out = d.view();
    decompose_moe_experts(*ref, a);
    compare(clamped ? "moe_experts clamped" : "moe_experts", f, d, kTolFloat);
  }
  EXPECT_EQ(table.failures(), 0) << table.failure_table();
  EXPECT_EQ(table.cases(), 16);
}

TEST(Decompositions, SchemaNamesExactlyTheOpsTheyNeed) {
  for (const auto& s : op_schemas()) {
    EXPECT_EQ(has_decomposition(s.name), !s.decomposition.empty()) << s.name;
    for (auto piece : s.decomposition) EXPECT_NE(find_op_schema(piece), nullptr) << s.name << " -> " << piece;
  }
}

}  // namespace
}  // namespace day0::test
