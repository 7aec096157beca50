#pragma once
// Writes small GGUF files byte by byte for the tests (the layout of io/gguf.h), including broken ones.
#include <cstdint>
#include <cstring>
#include <fstream>
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

}  // namespace day0::testing
