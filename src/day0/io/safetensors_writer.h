#pragma once
// Writing safetensors files and sharded checkpoints. Tensors are declared first (name, dtype, shape and
// a function that produces the bytes); writing streams them one at a time into a temporary file that
// is renamed into place at the end, so a reader never sees a half-written file.
//
//   SafetensorsWriter w;
//   w.set_metadata("format", "pt");
//   D0_RETURN_IF_ERROR(w.add(tensor_f32("x", {2, 3}, values)));
//   D0_RETURN_IF_ERROR(w.write("out/model.safetensors"));
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/core/status.h"

namespace day0 {

// A tensor to be written. `fill` receives a zeroed buffer of exactly the tensor's byte size.
struct PendingTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::function<Status(std::span<uint8_t>)> fill;
};

// Ready-made pending tensors holding their data (the value count must match the shape).
PendingTensor tensor_bytes(std::string name, DType dtype, std::vector<int64_t> shape,
                           std::vector<uint8_t> bytes);
PendingTensor tensor_f32(std::string name, std::vector<int64_t> shape, std::vector<float> values);
PendingTensor tensor_bf16(std::string name, std::vector<int64_t> shape, std::vector<float> values);  // RNE
PendingTensor tensor_i64(std::string name, std::vector<int64_t> shape, std::vector<int64_t> values);
// F8_E4M3, F8_E5M2, F8_E8M0, U8, I8 and BOOL are bytes: use tensor_bytes with the dtype.

// Byte size of shape x dtype, or kOutOfRange/kInvalidArgument (overflow, negative dim, partial byte).
Result<uint64_t> tensor_byte_size(DType dtype, std::span<const int64_t> shape);

class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Rejects duplicate names, "__metadata__", bad shapes and a missing fill.
  Status add(PendingTensor tensor);
  size_t size() const { return tensors_.size(); }
  uint64_t data_bytes() const { return data_bytes_; }
  // Streams every tensor to `path` + ".tmp<pid>" and renames it to `path`. Each fill runs once.
  Status write(const std::string& path) const;

 private:
  std::vector<PendingTensor> tensors_;
  std::vector<uint64_t> sizes_;
  std::map<std::string, std::string> metadata_;
  std::set<std::string> names_;
  uint64_t data_bytes_ = 0;
};

// A Hugging Face style checkpoint: shards of at most `max_shard_bytes` of tensor data (a tensor larger
// than that gets a shard of its own) named model-0000i-of-0000n.safetensors, plus
// model.safetensors.index.json. With one shard and `single_file`, writes model.safetensors only.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(uint64_t max_shard_bytes, bool single_file = false)
      : max_shard_bytes_(max_shard_bytes), single_file_(single_file) {}
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  Status add(PendingTensor tensor);
  uint64_t data_bytes() const { return data_bytes_; }
  // Writes into the existing directory `dir`; returns the shard file names written.
  Result<std::vector<std::string>> write(const std::string& dir) const;

 private:
  uint64_t max_shard_bytes_;
  bool single_file_;
  std::vector<PendingTensor> tensors_;
  std::vector<uint64_t> sizes_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, size_t> names_;
  uint64_t data_bytes_ = 0;
};

}  // namespace day0
