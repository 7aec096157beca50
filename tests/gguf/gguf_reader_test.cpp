// The GGUF reader: metadata of every type, tensor infos and views, and every malformed-input path.
#include <gtest/gtest.h>

#include <cstring>

#include "day0/io/gguf.h"
#include "gguf/gguf_builder.h"

namespace day0::gguf {
namespace {

using day0::testing::GgufBuilder;

Result<GgufFile> parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse(bytes, "test.gguf");
}

TEST(GgufReader, MetadataAndTensors) {
  GgufBuilder b;
  b.str("general.architecture", "llama").u32("llama.block_count", 2).f32("llama.rope.freq_base", 1e-5f);
  b.boolean("tokenizer.ggml.add_bos_token", true).u64("big", 1ull << 40).i32("neg", -7);
  b.strings("tokenizer.ggml.tokens", {"a", "", "ccc"}).i32s("tokenizer.ggml.token_type", {1, 3, -2});
  b.f32_tensor("x", {3, 2}, {1, 2, 3, 4, 5, 6});
  b.f32_tensor("y", {4}, {7, 8, 9, 10});
  const auto bytes = b.bytes();
  auto f = parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("llama.block_count"), 2);
  EXPECT_EQ(*f->get_float("llama.rope.freq_base"), 1e-5);  // the float32's shortest decimal
  EXPECT_EQ(*f->get_int("big"), int64_t{1} << 40);
  EXPECT_EQ(*f->get_int("neg"), -7);
  EXPECT_EQ(f->optional_bool("tokenizer.ggml.add_bos_token"), true);
  const Value* tokens = f->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->strings.size(), 3u);
  EXPECT_EQ(tokens->strings[2], "ccc");
  EXPECT_EQ(tokens->strings[1], "");
  EXPECT_EQ(f->find("tokenizer.ggml.token_type")->int_at(2), -2);
  EXPECT_EQ(f->get_int("general.architecture").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f->get_int("missing").status().code(), StatusCode::kNotFound);
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorInfo* x = f->find_tensor("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->hf_shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(x->offset % 32, 0u);
  EXPECT_EQ(x->offset, f->data_offset());
  auto values = dequantize_tensor(*f->find_tensor("y"));
  ASSERT_TRUE(values.is_ok());
  EXPECT_EQ(*values, (std::vector<float>{7, 8, 9, 10}));
}

TEST(GgufReader, CustomAlignment) {
  GgufBuilder b;
  b.alignment(64).f32_tensor("a", {2}, {1, 2}).f32_tensor("b", {2}, {3, 4});
  auto f = parse(b.bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, f->data_offset() + 64);
}

void expect_error(const std::vector<uint8_t>& bytes, StatusCode code, const std::string& needle) {
  auto f = parse(bytes);
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), code) << f.status().to_string();
  EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().to_string();
  EXPECT_NE(f.status().message().find("test.gguf"), std::string::npos) << f.status().to_string();
}

TEST(GgufReader, Errors) {
  expect_error({'G', 'G', 'U'}, StatusCode::kDataLoss, "magic");
  expect_error({'G', 'G', 'M', 'L', 3, 0, 0, 0}, StatusCode::kParseError, "not a GGUF file");
  {
    GgufBuilder b;
    b.version = 1;
    expect_error(b.bytes(), StatusCode::kUnsupported, "version 1");
  }
  {  // every truncation of a valid file before the end of its tensor data is an error, never a crash
    GgufBuilder b;
    b.str("k", "value").f32_tensor("t", {4}, {1, 2, 3, 4});
    const auto full = b.bytes();
    const size_t data_end = full.size() - 16;  // 16 bytes of data, then padding to 32
    for (size_t n = 0; n < data_end; ++n) {
      auto f = parse(std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(n)));
      EXPECT_FALSE(f.is_ok()) << n;
    }
  }
  {  // a tensor whose data runs past the end of the file
    GgufBuilder b;
    b.tensor({"t", {8}, 0, std::vector<uint8_t>(32), 64});
    expect_error(b.bytes(), StatusCode::kDataLoss, "tensor t: data");
  }
  {
    GgufBuilder b;
    b.tensor({"t", {32}, 77, std::vector<uint8_t>(32)});
    expect_error(b.bytes(), StatusCode::kUnsupported, "unknown ggml type 77");
  }
  {
    GgufBuilder b;
    b.f32_tensor("a", {16}, std::vector<float>(16)).tensor({"b", {8}, 0, std::vector<uint8_t>(32), 32});
    expect_error(b.bytes(), StatusCode::kParseError, "overlap");
  }
  {
    GgufBuilder b;
    b.tensor({"t", {8}, 0, std::vector<uint8_t>(32), 4});
    expect_error(b.bytes(), StatusCode::kParseError, "not a multiple of the alignment");
  }
  {
    GgufBuilder b;
    b.tensor({"t", {31}, 2, std::vector<uint8_t>(18)});  // Q4_0 rows must be whole blocks of 32
    expect_error(b.bytes(), StatusCode::kParseError, "whole blocks");
  }
  {
    GgufBuilder b;
    b.tensor({"t", {1, 1, 1, 1, 1}, 0, std::vector<uint8_t>(4)});
    expect_error(b.bytes(), StatusCode::kParseError, "n_dims 5");
  }
  {
    GgufBuilder b;
    b.tensor({"t", {0}, 0, {}});
    expect_error(b.bytes(), StatusCode::kParseError, "positive size");
  }
  {
    GgufBuilder b;
    b.tensor({"t", {1ull << 62, 1ull << 62}, 0, {}});
    expect_error(b.bytes(), StatusCode::kOutOfRange, "overflows");
  }
  {
    GgufBuilder b;
    b.u32("k", 1).u32("k", 2);
    expect_error(b.bytes(), StatusCode::kParseError, "appears twice");
  }
  {
    GgufBuilder b;
    b.f32_tensor("t", {1}, {1}).f32_tensor("t", {1}, {2});
    expect_error(b.bytes(), StatusCode::kParseError, "appears twice");
  }
  {
    GgufBuilder b;
    b.alignment(24);
    expect_error(b.bytes(), StatusCode::kParseError, "general.alignment");
  }
  {  // a string length larger than the file
    GgufBuilder b;
    b.str("k", "abc");
    auto bytes = b.bytes();
    const uint64_t huge = 1ull << 60;
    std::memcpy(bytes.data() + 24 + 8 + 1 + 4, &huge, 8);  // the value's length field
    expect_error(bytes, StatusCode::kDataLoss, "runs past the end");
  }
  {  // counts that cannot fit
    GgufBuilder b;
    auto bytes = b.bytes();
    const uint64_t huge = 1ull << 50;
    std::memcpy(bytes.data() + 8, &huge, 8);
    expect_error(bytes, StatusCode::kDataLoss, "tensor_count");
  }
  {
    GgufBuilder b;
    b.u32("k", 1);
    auto bytes = b.bytes();
    const uint32_t bad_type = 13;
    std::memcpy(bytes.data() + 24 + 8 + 1, &bad_type, 4);
    expect_error(bytes, StatusCode::kParseError, "unknown value type 13");
  }
}

}  // namespace
}  // namespace day0::gguf
