// GGUF -> Hugging Face on a tiny hand-built Llama file: names, shapes, the Q/K row order, the config,
// the rebuilt tokenizer, and the refusals.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "day0/io/gguf_convert.h"
#include "day0/io/safetensors_file.h"
#include "day0/tokenizer/tokenizer.h"
#include "gguf/gguf_builder.h"

namespace day0::gguf {
namespace {

namespace fs = std::filesystem;
using day0::testing::GgufBuilder;

struct Scratch {
  Scratch() {
    char tmpl[] = "/tmp/day0-gguf-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

// Rows x cols F32 values r * 10 + c, as a ggml tensor (dims {cols, rows}).
std::vector<float> numbered(uint64_t rows, uint64_t cols) {
  std::vector<float> v;
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) v.push_back(static_cast<float>(r * 10 + c));
  }
  return v;
}

GgufBuilder tiny_llama(const std::string& pre = "smollm") {
  return day0::testing::tiny_llama_gguf(
      [](uint64_t rows, uint64_t cols, int) { return numbered(rows, cols); }, pre);
}

TEST(GgufConvert, UnpermuteRotaryRows) {
  // Two heads of 4 rows: llama.cpp stores rows (h, j, i) where HF has (h, i, j).
  const std::vector<float> in = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<float> out(8);
  unpermute_rotary_rows(in, out, 2, 4, 1);
  EXPECT_EQ(out, (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
}

TEST(GgufConvert, TinyLlamaFolder) {
  Scratch dir;
  const std::string gguf_path = dir.path + "/tiny.gguf";
  tiny_llama().write(gguf_path);
  const std::string out = dir.path + "/hf";
  ConvertOptions options;
  options.dtype = DType::kF32;
  Status st = convert_gguf_to_hf(gguf_path, out, options);
  ASSERT_TRUE(st.is_ok()) << st.to_string();

  const auto config = nlohmann::json::parse(std::ifstream(out + "/config.json"));
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(config["num_attention_heads"], 2);
  EXPECT_EQ(config["num_key_value_heads"], 1);
  EXPECT_EQ(config["head_dim"], 4);
  EXPECT_EQ(config["rms_norm_eps"], 1e-5);
  EXPECT_EQ(config["rope_theta"], 100000.0);
  EXPECT_EQ(config["tie_word_embeddings"], true);
  EXPECT_EQ(config["vocab_size"], 6);
  EXPECT_EQ(config["torch_dtype"], "float32");

  auto st_file = SafetensorsFile::open(out + "/model.safetensors");
  ASSERT_TRUE(st_file.is_ok()) << st_file.status().to_string();
  auto k = st_file->tensor("model.layers.0.self_attn.k_proj.weight");
  ASSERT_TRUE(k.is_ok());
  EXPECT_EQ(std::vector<int64_t>(k->shape.begin(), k->shape.end()), (std::vector<int64_t>{4, 8}));
  const auto* kv = reinterpret_cast<const float*>(k->data.data());
  // HF row 1 is (half 0, j 1) = GGUF row 2; HF row 2 is (half 1, j 0) = GGUF row 1.
  EXPECT_EQ(kv[1 * 8 + 3], 23.0f);
  EXPECT_EQ(kv[2 * 8 + 3], 13.0f);
  auto q = st_file->tensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.is_ok());
  const auto* qv = reinterpret_cast<const float*>(q->data.data());
  EXPECT_EQ(qv[5 * 8], 60.0f);  // head 1, half 0, j 1 <- GGUF row 4 + 2
  auto v = st_file->tensor("model.layers.0.self_attn.v_proj.weight");
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(reinterpret_cast<const float*>(v->data.data())[1 * 8], 10.0f);  // v is not permuted
  auto down = st_file->tensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(down.is_ok());
  EXPECT_EQ(std::vector<int64_t>(down->shape.begin(), down->shape.end()), (std::vector<int64_t>{8, 16}));
  EXPECT_FALSE(st_file->tensor("lm_head.weight").is_ok());  // tied

  auto tok = tokenizer::load_tokenizer(out);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->encode(" ab"), (std::vector<int32_t>{5}));
  EXPECT_EQ((*tok)->encode("ab<|endoftext|>"), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ((*tok)->decode(std::vector<int32_t>{3, 5}), "ab ab");
  EXPECT_TRUE((*tok)->chat_template().has_value());

  // Writing over a non-empty folder is refused; nothing is left behind.
  st = convert_gguf_to_hf(gguf_path, out, options);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
}

TEST(GgufConvert, BF16Output) {
  Scratch dir;
  tiny_llama().write(dir.path + "/t.gguf");
  ConvertOptions options;
  options.dtype = DType::kBF16;
  ASSERT_TRUE(convert_gguf_to_hf(dir.path + "/t.gguf", dir.path + "/hf", options).is_ok());
  auto st_file = SafetensorsFile::open(dir.path + "/hf/model.safetensors");
  ASSERT_TRUE(st_file.is_ok());
  auto e = st_file->tensor("model.embed_tokens.weight");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->dtype, DType::kBF16);
  uint16_t bits;
  std::memcpy(&bits, e->data.data() + 2 * (5 * 8 + 7), 2);
  EXPECT_EQ(bits, 0x4264);  // 57.0 = 2^5 * (1 + 100/128) in bfloat16
}

TEST(GgufConvert, Refusals) {
  Scratch dir;
  auto plan_error = [&](GgufBuilder b) {
    const auto bytes = b.bytes();
    auto f = GgufFile::parse(bytes, "x.gguf");
    EXPECT_TRUE(f.is_ok()) << f.status().to_string();
    auto p = plan_hf_conversion(*f);
    EXPECT_FALSE(p.is_ok());
    return p.status();
  };
  Status st = plan_error(tiny_llama().u32("llama.attention.sliding_window", 128));
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("llama.attention.sliding_window"), std::string::npos) << st.to_string();
  st = plan_error(tiny_llama().f32_tensor("rope_freqs.weight", {2}, {1, 1}));
  EXPECT_NE(st.message().find("rope_freqs.weight"), std::string::npos) << st.to_string();
  GgufBuilder other;
  other.str("general.architecture", "mamba");
  st = plan_error(other);
  EXPECT_NE(st.message().find("mamba"), std::string::npos) << st.to_string();
  st = plan_error(tiny_llama().str("llama.rope.scaling.type", "yarn"));
  EXPECT_NE(st.message().find("yarn"), std::string::npos) << st.to_string();
  st = plan_error(tiny_llama("some-new-pre"));
  EXPECT_NE(st.message().find("tokenizer.ggml.pre \"some-new-pre\""), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace day0::gguf
