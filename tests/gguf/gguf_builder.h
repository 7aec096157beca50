#pragma once
// Writes small GGUF files byte by byte for the tests (the layout of io/gguf.h), including broken ones.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace day0::testing {

class GgufBuilder {
 public:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;  // ggml order
    uint32_t type;
    std::vector<uint8_t> data;
    int64_t offset_override = -1;  // relative offset to write instead of the computed one
  };

  GgufBuilder& u32(const std::string& key, uint32_t v) { return scalar(key, 4, &v, 4); }
  GgufBuilder& i32(const std::string& key, int32_t v) { return scalar(key, 5, &v, 4); }
  GgufBuilder& f32(const std::string& key, float v) { return scalar(key, 6, &v, 4); }
  GgufBuilder& boolean(const std::string& key, bool v) {
    const uint8_t b = v ? 1 : 0;
    return scalar(key, 7, &b, 1);
  }
  GgufBuilder& u64(const std::string& key, uint64_t v) { return scalar(key, 10, &v, 8); }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    put_string(kv_, key);
    put<uint32_t>(kv_, 8);
    put_string(kv_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& values) {
    put_string(kv_, key);
    put<uint32_t>(kv_, 9);
    put<uint32_t>(kv_, 8);
    put<uint64_t>(kv_, values.size());
    for (const auto& v : values) put_string(kv_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& i32s(const std::string& key, const std::vector<int32_t>& values) {
    put_string(kv_, key);
    put<uint32_t>(kv_, 9);
    put<uint32_t>(kv_, 5);
    put<uint64_t>(kv_, values.size());
    for (int32_t v : values) put(kv_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& tensor(Tensor t) {
    tensors_.push_back(std::move(t));
    return *this;
  }
  GgufBuilder& f32_tensor(const std::string& name, std::vector<uint64_t> dims,
                          const std::vector<float>& values) {
    std::vector<uint8_t> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return tensor({name, std::move(dims), 0, std::move(bytes)});
  }
  GgufBuilder& alignment(uint32_t a) {
    alignment_ = a;
    return u32("general.alignment", a);
  }

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    put<uint32_t>(out, 0x46554747);
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, n_kv_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      put_string(out, t.name);
      put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) put(out, d);
      put(out, t.type);
      put<uint64_t>(out, t.offset_override >= 0 ? static_cast<uint64_t>(t.offset_override) : offset);
      offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    while (out.size() % alignment_ != 0) out.push_back(0);
    for (const Tensor& t : tensors_) {
      out.insert(out.end(), t.data.begin(), t.data.end());
      while (out.size() % alignment_ != 0) out.push_back(0);
    }
    return out;
  }

  void write(const std::string& path) const {
    const auto b = bytes();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

  uint32_t version = 3;

 private:
  template <typename T>
  static void put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  static void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  GgufBuilder& scalar(const std::string& key, uint32_t type, const void* v, size_t n) {
    put_string(kv_, key);
    put(kv_, type);
    const auto* p = static_cast<const uint8_t*>(v);
    kv_.insert(kv_.end(), p, p + n);
    ++n_kv_;
    return *this;
  }

  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

// hidden 8, 2 heads of 4, 1 KV head, FFN 16, one layer, a 6-token byte-level BPE vocabulary.
// `values(rows, cols, index)` gives the row-major F32 values of the index-th 2-D weight.
inline GgufBuilder tiny_llama_gguf(
    const std::function<std::vector<float>(uint64_t rows, uint64_t cols, int index)>& values,
    const std::string& pre = "smollm") {
  GgufBuilder b;
  b.str("general.architecture", "llama").str("general.name", "tiny");
  b.u32("llama.block_count", 1).u32("llama.embedding_length", 8).u32("llama.feed_forward_length", 16);
  b.u32("llama.attention.head_count", 2).u32("llama.attention.head_count_kv", 1);
  b.f32("llama.rope.freq_base", 100000.0f).f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.u32("llama.context_length", 64).u32("llama.rope.dimension_count", 4);
  b.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", pre);
  b.strings("tokenizer.ggml.tokens", {"<|endoftext|>", "a", "b", "ab", "\xc4\xa0",
                                      "\xc4\xa0"
                                      "ab"});
  b.i32s("tokenizer.ggml.token_type", {3, 1, 1, 1, 1, 1});
  b.strings("tokenizer.ggml.merges", {"a b", "\xc4\xa0 ab"});
  b.u32("tokenizer.ggml.bos_token_id", 0).u32("tokenizer.ggml.eos_token_id", 0);
  b.boolean("tokenizer.ggml.add_bos_token", false);
  b.str("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}");
  b.f32_tensor("token_embd.weight", {8, 6}, values(6, 8, 0));
  b.f32_tensor("output_norm.weight", {8}, std::vector<float>(8, 1.0f));
  b.f32_tensor("blk.0.attn_norm.weight", {8}, std::vector<float>(8, 1.0f));
  b.f32_tensor("blk.0.ffn_norm.weight", {8}, std::vector<float>(8, 1.0f));
  b.f32_tensor("blk.0.attn_q.weight", {8, 8}, values(8, 8, 1));
  b.f32_tensor("blk.0.attn_k.weight", {8, 4}, values(4, 8, 2));
  b.f32_tensor("blk.0.attn_v.weight", {8, 4}, values(4, 8, 3));
  b.f32_tensor("blk.0.attn_output.weight", {8, 8}, values(8, 8, 4));
  b.f32_tensor("blk.0.ffn_gate.weight", {8, 16}, values(16, 8, 5));
  b.f32_tensor("blk.0.ffn_up.weight", {8, 16}, values(16, 8, 6));
  b.f32_tensor("blk.0.ffn_down.weight", {16, 8}, values(8, 16, 7));
  return b;
}

}  // namespace day0::testing
