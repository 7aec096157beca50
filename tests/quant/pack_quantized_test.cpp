// compressed-tensors pack-quantized: packing against hand-worked words, round trips, the group
// quantizer against hand-worked rows and its error bound, the config JSON and the weight table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "day0/core/error.h"
#include "day0/model/config_parser.h"
#include "day0/model/config_writer.h"
#include "day0/model/packed_int_config.h"
#include "day0/model/tensor_manifest.h"
#include "day0/quant/pack_quantized.h"

namespace day0 {
namespace {

TEST(PackQuantized, EightBitExampleOfTheReferenceDocstring) {
  // compressed-tensors documents pack_to_int32([1, 2], 8 bits) = 33409: codes 129, 130 low byte first.
  const std::vector<int8_t> v = {1, 2};
  EXPECT_EQ(pack_rows(v, 1, 2, 8), std::vector<int32_t>({33409}));
  EXPECT_EQ(unpack_rows(std::vector<int32_t>{33409}, 1, 2, 8), v);
}

TEST(PackQuantized, FourBitRowsHandWorked) {
  // Row 0: codes q + 8 = 9 a 0 f 8 7 b 5 | d, element 0 in the lowest nibble; the 9th value starts a
  // zero-padded second word. Row 1: eight 7s give code f everywhere: the word is -1 as int32.
  const std::vector<int8_t> v = {1, 2, -8, 7, 0, -1, 3, -3, 5,  //
                                 7, 7, 7,  7, 7, 7,  7, 7,  -8};
  const std::vector<int32_t> packed = pack_rows(v, 2, 9, 4);
  ASSERT_EQ(packed.size(), 4u);
  EXPECT_EQ(static_cast<uint32_t>(packed[0]), 0x5B78F0A9u);
  EXPECT_EQ(packed[1], 0xD);
  EXPECT_EQ(packed[2], -1);
  EXPECT_EQ(packed[3], 0);  // -8 is code 0
  EXPECT_EQ(unpack_rows(packed, 2, 9, 4), v);
}

TEST(PackQuantized, ZeroPointsPackAlongRows) {
  // The same nine values as a column [9, 1]: dim 0 packed gives the same two words, one per 8 rows.
  const std::vector<int8_t> v = {1, 2, -8, 7, 0, -1, 3, -3, 5};
  const std::vector<int32_t> packed = pack_columns(v, 9, 1, 4);
  ASSERT_EQ(packed.size(), 2u);
  EXPECT_EQ(static_cast<uint32_t>(packed[0]), 0x5B78F0A9u);
  EXPECT_EQ(packed[1], 0xD);
  // Two columns interleave: word (r / 8, c).
  const std::vector<int8_t> two = {1, -1, 2, -2};  // [2, 2]
  const std::vector<int32_t> p2 = pack_columns(two, 2, 2, 4);
  ASSERT_EQ(p2.size(), 2u);
  EXPECT_EQ(p2[0], 9 | (10 << 4));
  EXPECT_EQ(p2[1], 7 | (6 << 4));
  EXPECT_EQ(unpack_columns(p2, 2, 2, 4), two);
}

TEST(PackQuantized, RandomRoundTripsEveryWidthAndRaggedShape) {
  std::mt19937 rng(7);
  for (int bits : {4, 8}) {
    std::uniform_int_distribution<int> dist(quant_min(bits), quant_max(bits));
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {17, 33}, {9, 64}}) {
      std::vector<int8_t> v(static_cast<size_t>(rows * cols));
      for (auto& x : v) x = static_cast<int8_t>(dist(rng));
      EXPECT_EQ(unpack_rows(pack_rows(v, rows, cols, bits), rows, cols, bits), v) << bits << " " << rows;
      EXPECT_EQ(unpack_columns(pack_columns(v, rows, cols, bits), rows, cols, bits), v)
          << bits << " " << rows;
    }
  }
}

TEST(PackQuantized, OutOfRangeValueIsABrokenInvariant) {
  const std::vector<int8_t> v = {8};
  EXPECT_THROW(pack_rows(v, 1, 1, 4), std::exception);
}

TEST(GroupQuantizer, SymmetricInt4HandWorked) {
  // Group 1: amax 3.5 -> scale 3.5 / 7 = 0.5 represents every value exactly (squared error 0; any
  // finer candidate 3.5 / d, d in (7, 8], clips 3.5 or misses 2): kept.
  // Group 2: amax 4 at a negative value -> 4 / 8 = 0.5 reaches -8 and is exact again, where 4 / 7
  // would give -7, 2, 4 (3.5 -> 4, even), 5: squared error 0.122.
  // Group 3: all zero -> scale 1, codes 0.
  const std::vector<float> w = {3.5f, -1.0f, 2.0f, 0.5f, -4.0f, 1.0f, 2.0f, 3.0f, 0, 0, 0, 0};
  const PackArgs args{4, 4, true, DType::kF32};
  const GroupQuantized q = quantize_groups(w, 1, 12, args);
  EXPECT_EQ(q.q, std::vector<int8_t>({7, -2, 4, 1, -8, 2, 4, 6, 0, 0, 0, 0}));
  EXPECT_EQ(q.scale, std::vector<float>({0.5f, 0.5f, 1.0f}));
  EXPECT_TRUE(q.zero_point.empty());
  std::vector<float> out(12);
  dequantize_groups(q.q, 1, 12, q.scale, q.zero_point, 4, out);
  EXPECT_EQ(out, w);
}

TEST(GroupQuantizer, SymmetricScaleTradesClippingForAFinerStep) {
  // amax 3.5: 3.5 / 7 = 0.5 gives 7, -2, 4 (2.25 / 0.5 = 4.5, even), 1 with squared error 0.0625;
  // 3.5 / 7.25 = 0.48276 gives 7, -2, 5, 1 with 0.0429, the least of the nine candidates.
  const std::vector<float> w = {3.5f, -1.0f, 2.25f, 0.5f};
  const GroupQuantized q = quantize_groups(w, 1, 4, PackArgs{4, 4, true, DType::kF32});
  EXPECT_EQ(q.q, std::vector<int8_t>({7, -2, 5, 1}));
  EXPECT_EQ(q.scale[0], 3.5f / 7.25f);
}

TEST(GroupQuantizer, AsymmetricInt4HandWorked) {
  // lo -1, hi 14: scale 15 / 15 = 1, zp = round(-8 - (-1) / 1) = -7, q = x + zp: exact.
  const std::vector<float> w = {-1, 0, 2, 14};
  const GroupQuantized q = quantize_groups(w, 1, 4, PackArgs{4, 4, false, DType::kBF16});
  EXPECT_EQ(q.q, std::vector<int8_t>({-8, -7, -5, 7}));
  EXPECT_EQ(q.zero_point, std::vector<int8_t>({-7}));
  EXPECT_EQ(q.scale, std::vector<float>({1.0f}));
  std::vector<float> out(4);
  dequantize_groups(q.q, 1, 4, q.scale, q.zero_point, 4, out);
  EXPECT_EQ(out, w);
}

TEST(GroupQuantizer, SymmetricInt8HandWorkedAndScaleRoundedBeforeUse) {
  // amax 254 at a negative value -> scale 254 / 128 = 1.984375 (a BF16): 127 -> 64, -254 -> -128
  // exactly, 1 -> 0.504 -> 1; squared error 0.969, against 2.0 for scale 254 / 127 = 2 (127 -> 63.5
  // -> 64, 1 -> 0.5 -> 0).
  const std::vector<float> w = {127, -254, 0, 1};
  const GroupQuantized q = quantize_groups(w, 1, 4, PackArgs{8, 4, true, DType::kBF16});
  EXPECT_EQ(q.q, std::vector<int8_t>({64, -128, 0, 1}));
  EXPECT_EQ(q.scale[0], 1.984375f);
  // amax 1 -> scale 1/127 is not a BF16: the stored scale is its BF16 rounding (0.0078735), and q
  // uses that one (the finer candidates round to BF16 values that clip 1 and -1 more).
  const std::vector<float> w2 = {1, 0.5f, -1, 0};
  const GroupQuantized q2 = quantize_groups(w2, 1, 4, PackArgs{8, 4, true, DType::kBF16});
  EXPECT_EQ(q2.scale[0], round_to_dtype(1.0f / 127.0f, DType::kBF16));
  EXPECT_NE(q2.scale[0], 1.0f / 127.0f);
  EXPECT_EQ(q2.q[0], static_cast<int8_t>(std::nearbyint(1.0f / q2.scale[0])));
}

TEST(GroupQuantizer, ErrorIsBoundedPerElementAndNeverWorseThanAmaxOverQmaxPerGroup) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  const int64_t rows = 16, cols = 256;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = normal(rng);
  w[3] = 0.9f;  // an outlier sets its group's scale
  for (int bits : {4, 8}) {
    for (bool symmetric : {true, false}) {
      for (int64_t group : {32, 128}) {
        const PackArgs args{bits, group, symmetric, DType::kBF16};
        const GroupQuantized q = quantize_groups(w, rows, cols, args);
        std::vector<float> out(w.size());
        dequantize_groups(q.q, rows, cols, q.scale, q.zero_point, group, out);
        double worst = 0;
        int64_t finer = 0;
        for (int64_t g = 0; g < rows * (cols / group); ++g) {
          const float scale = q.scale[static_cast<size_t>(g)];
          const int64_t r = g / (cols / group), c0 = (g % (cols / group)) * group;
          double error = 0, plain_error = 0;
          float amax = 0;
          for (int64_t j = 0; j < group; ++j)
            amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * cols + c0 + j)]));
          // The plain symmetric scale amax / qmax as stored, for comparison.
          const float qmax = static_cast<float>((1 << (bits - 1)) - 1);
          const float plain = round_to_dtype(amax / qmax, DType::kBF16);
          for (int64_t j = 0; j < group; ++j) {
            const size_t i = static_cast<size_t>(r * cols + c0 + j);
            worst = std::max(worst, static_cast<double>(std::fabs(out[i] - w[i]) / scale));
            error += (out[i] - w[i]) * static_cast<double>(out[i] - w[i]);
            const float p = std::clamp(std::nearbyint(w[i] / plain), -qmax - 1, qmax) * plain;
            plain_error += (p - w[i]) * static_cast<double>(p - w[i]);
          }
          if (symmetric) {
            EXPECT_LE(error, plain_error * (1 + 1e-9)) << bits << " g" << group << " group " << g;
            finer += scale < plain;
          }
        }
        // Asymmetric: half a step, plus what rounding the scale to BF16 moves the extreme values
        // (2^-8 relative of up to 2^bits steps). Symmetric: the extreme may be clipped by one step.
        const double bound = (symmetric ? 1.0 : 0.5) + std::ldexp(1.0, bits - 8) + 1e-6;
        EXPECT_LE(worst, bound) << bits << symmetric << group;
        // On normal weights a finer step wins at least wherever the extreme is negative (it then
        // reaches qmin exactly): about half the groups.
        if (symmetric) {
          EXPECT_GT(finer, rows * (cols / group) / 4) << bits << " g" << group;
        }
      }
    }
  }
}

ModelSpec llama_golden_spec() {
  auto spec = load_model_config(DAY0_TEST_DATA_DIR "/golden/llama3/config.json");
  D0_CHECK_MSG(spec.is_ok(), spec.status().to_string());
  return *spec;
}

TEST(CompressedTensorsConfig, WritesAndParsesBack) {
  ModelSpec spec = llama_golden_spec();
  spec.weights.packed = PackedIntSpec{4, 32, false, {"Linear"}, {"lm_head", "re:.*mlp.gate$"}};
  const nlohmann::json config = to_hf_config(spec);
  const auto& q = config.at("quantization_config");
  EXPECT_EQ(q.at("quant_method"), "compressed-tensors");
  EXPECT_EQ(q.at("format"), "pack-quantized");
  const auto& w = q.at("config_groups").at("group_0").at("weights");
  EXPECT_EQ(w.at("num_bits"), 4);
  EXPECT_EQ(w.at("strategy"), "group");
  EXPECT_EQ(w.at("group_size"), 32);
  EXPECT_EQ(w.at("symmetric"), false);
  auto parsed = parse_model_config(config, "config.json");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->weights.packed, spec.weights.packed);
  EXPECT_EQ(*parsed, spec);
}

TEST(CompressedTensorsConfig, RefusesWhatTheLoaderCannotHonour) {
  const nlohmann::json base = to_hf_config(llama_golden_spec());
  const nlohmann::json good = compressed_tensors_config(PackedIntSpec{4, 32, true, {"Linear"}, {"lm_head"}});
  struct Case {
    const char* pointer;
    nlohmann::json value;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"/format", "int-quantized", "format \"int-quantized\""},
      {"/config_groups/group_0/weights/num_bits", 3, "3 bits"},
      {"/config_groups/group_0/weights/type", "float", "\"float\" weights"},
      {"/config_groups/group_0/weights/actorder", "group", "act-order"},
      {"/config_groups/group_0/weights/strategy", "tensor", "strategy \"tensor\""},
      {"/config_groups/group_0/input_activations", {{"num_bits", 8}}, "activation quantization"},
      {"/kv_cache_scheme", {{"num_bits", 8}}, "KV cache"},
      {"/ignore", {"re:(unclosed"}, "not a valid regex"},
  };
  for (const auto& c : cases) {
    nlohmann::json config = base;
    config["quantization_config"] = good;
    config["quantization_config"][nlohmann::json::json_pointer(c.pointer)] = c.value;
    auto parsed = parse_model_config(config, "config.json");
    ASSERT_FALSE(parsed.is_ok()) << c.pointer;
    EXPECT_NE(parsed.status().message().find(c.needle), std::string::npos) << parsed.status().to_string();
  }
}

TEST(CompressedTensorsConfig, TargetsAndIgnoreSelectModules) {
  const PackedIntSpec p{
      4, 32, true, {"Linear"}, {"lm_head", "re:.*\\.mlp\\.gate$", "model.layers.0.self_attn.q_proj"}};
  EXPECT_TRUE(packs_module(p, "model.layers.1.self_attn.q_proj", true));
  EXPECT_FALSE(packs_module(p, "model.layers.0.self_attn.q_proj", true));
  EXPECT_FALSE(packs_module(p, "model.layers.3.mlp.gate", true));
  EXPECT_TRUE(packs_module(p, "model.layers.3.mlp.gate_proj", true));  // the regex is anchored by $
  EXPECT_FALSE(packs_module(p, "lm_head", true));
  EXPECT_FALSE(packs_module(p, "model.embed_tokens", false));  // not a Linear
  // Kimi-K2-Thinking style: only the routed experts, by regex matched from the start of the name.
  const PackedIntSpec experts{4, 32, true, {"re:.*mlp\\.experts\\..*"}, {}};
  EXPECT_TRUE(packs_module(experts, "model.layers.1.mlp.experts.7.down_proj", true));
  EXPECT_FALSE(packs_module(experts, "model.layers.1.mlp.shared_experts.down_proj", true));
  EXPECT_FALSE(packs_module(experts, "model.layers.1.self_attn.o_proj", true));
  // A catastrophically backtracking pattern ends at PCRE2's match limit (no match) instead of hanging.
  const PackedIntSpec hostile{4, 32, true, {"Linear"}, {"re:(a*)*b"}};
  EXPECT_TRUE(packs_module(hostile, std::string(4000, 'a'), true));
}

TEST(PackedWeightTable, ListsPackedTensorsWithTheirBytesAndParameters) {
  ModelSpec plain = llama_golden_spec();
  ModelSpec spec = plain;
  spec.weights.packed = PackedIntSpec{4, 32, false, {"Linear"}, {"lm_head"}};
  auto m = build_tensor_manifest(spec);
  auto base = build_tensor_manifest(plain);
  ASSERT_TRUE(m.is_ok() && base.is_ok());
  std::map<std::string, TensorSpec> by_name;
  int64_t params = 0, base_params = 0;
  for (const auto& t : m->tensors) {
    by_name[t.name] = t;
    params += t.params;
  }
  for (const auto& t : base->tensors) base_params += t.params;
  EXPECT_EQ(params, base_params);  // packing moves bytes, not parameters
  const std::string q = "model.layers.0.self_attn.q_proj";
  ASSERT_TRUE(by_name.count(q + ".weight_packed"));
  EXPECT_FALSE(by_name.count(q + ".weight"));
  const TensorSpec& packed = by_name[q + ".weight_packed"];
  const int64_t rows = spec.n_heads * spec.head_dim, cols = spec.hidden_size;
  EXPECT_EQ(packed.dtype, DType::kI32);
  EXPECT_EQ(packed.shape, std::vector<int64_t>({rows, cols / 8}));
  EXPECT_EQ(packed.params, rows * cols);
  EXPECT_EQ(packed.bytes, static_cast<uint64_t>(rows * cols / 2));  // half a byte per parameter
  EXPECT_EQ(packed.slot, WeightSlot::kQ);
  EXPECT_EQ(by_name[q + ".weight_scale"].shape, std::vector<int64_t>({rows, cols / 32}));
  EXPECT_EQ(by_name[q + ".weight_scale"].role, TensorRole::kQuantScale);
  EXPECT_EQ(by_name[q + ".weight_zero_point"].shape, std::vector<int64_t>({(rows + 7) / 8, cols / 32}));
  EXPECT_EQ(by_name[q + ".weight_shape"].dtype, DType::kI64);
  // Embedding, norms and the ignored LM head keep their storage.
  EXPECT_EQ(by_name["model.embed_tokens.weight"].dtype, DType::kBF16);
  EXPECT_EQ(by_name["lm_head.weight"].dtype, DType::kBF16);
  EXPECT_EQ(by_name["model.norm.weight"].dtype, DType::kBF16);
}

}  // namespace
}  // namespace day0
