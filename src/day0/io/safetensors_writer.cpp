#include "day0/io/safetensors_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/core/checked_math.h"
#include "day0/core/numeric.h"
#include "day0/io/checkpoint.h"

namespace day0 {

namespace {

using nlohmann::json;

template <typename T>
PendingTensor tensor_of(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<T> values) {
  PendingTensor t{std::move(name), dtype, std::move(shape), nullptr};
  // Shared so that copies of the PendingTensor (one per shard writer) do not copy the data.
  auto data = std::make_shared<const std::vector<T>>(std::move(values));
  t.fill = [data, name = t.name](std::span<uint8_t> out) -> Status {
    if (out.size() != data->size() * sizeof(T)) {
      return invalid_argument(fmt::format("tensor '{}': {} values given, shape needs {}", name, data->size(),
                                          out.size() / sizeof(T)));
    }
    if (!data->empty()) std::memcpy(out.data(), data->data(), out.size());
    return Status::ok();
  };
  return t;
}

// Writes all of `bytes` or fails with the file named.
Status write_all(std::FILE* f, const void* data, size_t size, const std::string& path) {
  if (size != 0 && std::fwrite(data, 1, size, f) != size) {
    return io_error(path + ": write failed: " + std::strerror(errno));
  }
  return Status::ok();
}

Status check_new_tensor(const PendingTensor& t, const std::set<std::string>* seen) {
  if (t.name.empty() || t.name == "__metadata__")
    return invalid_argument("invalid tensor name '" + t.name + "'");
  if (!t.fill) return invalid_argument("tensor '" + t.name + "': no data");
  if (seen != nullptr && seen->count(t.name)) return invalid_argument("tensor '" + t.name + "' added twice");
  return Status::ok();
}

}  // namespace

PendingTensor tensor_bytes(std::string name, DType dtype, std::vector<int64_t> shape,
                           std::vector<uint8_t> bytes) {
  return tensor_of(std::move(name), dtype, std::move(shape), std::move(bytes));
}
PendingTensor tensor_f32(std::string name, std::vector<int64_t> shape, std::vector<float> values) {
  return tensor_of(std::move(name), DType::kF32, std::move(shape), std::move(values));
}
PendingTensor tensor_i64(std::string name, std::vector<int64_t> shape, std::vector<int64_t> values) {
  return tensor_of(std::move(name), DType::kI64, std::move(shape), std::move(values));
}
PendingTensor tensor_bf16(std::string name, std::vector<int64_t> shape, std::vector<float> values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
  return tensor_of(std::move(name), DType::kBF16, std::move(shape), std::move(bits));
}

Result<uint64_t> tensor_byte_size(DType dtype, std::span<const int64_t> shape) {
  const auto numel = checked_product(shape);
  if (!numel) return out_of_range("shape has a negative dimension or overflows");
  const auto bits = checked_mul(*numel, static_cast<uint64_t>(dtype_bits(dtype)));
  if (!bits) return out_of_range("shape overflows 64-bit byte counts");
  if (*bits % 8 != 0) {
    return invalid_argument(
        fmt::format("{} elements of {} are not a whole number of bytes", *numel, dtype_name(dtype)));
  }
  return *bits / 8;
}

Status SafetensorsWriter::add(PendingTensor tensor) {
  D0_RETURN_IF_ERROR(check_new_tensor(tensor, &names_));
  auto size = tensor_byte_size(tensor.dtype, tensor.shape);
  if (!size.is_ok()) return size.status().with_context("tensor '" + tensor.name + "'");
  const auto total = checked_add(data_bytes_, *size);
  if (!total) return out_of_range("tensor '" + tensor.name + "': file size overflows");
  data_bytes_ = *total;
  sizes_.push_back(*size);
  names_.insert(tensor.name);
  tensors_.push_back(std::move(tensor));
  return Status::ok();
}

Status SafetensorsWriter::write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + sizes_[i]}}};
    offset += sizes_[i];
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error(tmp + ": cannot create: " + std::strerror(errno));
  auto fail = [&](Status st) {
    std::fclose(f);
    std::remove(tmp.c_str());
    return st;
  };
  if (auto st = write_all(f, length, 8, tmp); !st) return fail(st);
  if (auto st = write_all(f, text.data(), text.size(), tmp); !st) return fail(st);
  std::vector<uint8_t> buffer;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    buffer.assign(sizes_[i], 0);
    if (auto st = tensors_[i].fill(buffer); !st) return fail(st.with_context(path));
    if (auto st = write_all(f, buffer.data(), buffer.size(), tmp); !st) return fail(st);
  }
  if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0)
    return fail(io_error(tmp + ": flush failed: " + std::strerror(errno)));
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    return io_error(tmp + ": close failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return io_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  return Status::ok();
}

Status CheckpointWriter::add(PendingTensor tensor) {
  if (names_.count(tensor.name)) return invalid_argument("tensor '" + tensor.name + "' added twice");
  D0_RETURN_IF_ERROR(check_new_tensor(tensor, nullptr));
  auto size = tensor_byte_size(tensor.dtype, tensor.shape);
  if (!size.is_ok()) return size.status().with_context("tensor '" + tensor.name + "'");
  const auto total = checked_add(data_bytes_, *size);
  if (!total) return out_of_range("tensor '" + tensor.name + "': checkpoint size overflows");
  data_bytes_ = *total;
  names_[tensor.name] = tensors_.size();
  sizes_.push_back(*size);
  tensors_.push_back(std::move(tensor));
  return Status::ok();
}

Result<std::vector<std::string>> CheckpointWriter::write(const std::string& dir) const {
  // Greedy packing in declaration order: a shard closes when the next tensor would overflow it.
  std::vector<std::vector<size_t>> shards;
  uint64_t current = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (shards.empty() || (current > 0 && current + sizes_[i] > max_shard_bytes_)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += sizes_[i];
  }
  if (shards.empty()) shards.emplace_back();

  std::vector<std::string> names;
  const bool single = single_file_ && shards.size() == 1;
  for (size_t s = 0; s < shards.size(); ++s) {
    names.push_back(single ? std::string(kSingleSafetensorsName)
                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size()));
  }
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    SafetensorsWriter writer;
    for (const auto& [key, value] : metadata_) writer.set_metadata(key, value);
    for (size_t i : shards[s]) {
      PendingTensor copy = tensors_[i];
      D0_RETURN_IF_ERROR(writer.add(std::move(copy)));
      weight_map[tensors_[i].name] = names[s];
    }
    D0_RETURN_IF_ERROR(writer.write(dir + "/" + names[s]));
  }
  if (!single) {
    json index = {{"metadata", {{"total_size", data_bytes_}}}, {"weight_map", weight_map}};
    const std::string path = dir + "/" + kSafetensorsIndexName;
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) return io_error(tmp + ": cannot create: " + std::strerror(errno));
    const std::string text = index.dump(2) + "\n";
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::remove(tmp.c_str());
      return io_error(path + ": cannot write");
    }
  }
  return names;
}

}  // namespace day0
