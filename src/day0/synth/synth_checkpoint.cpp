#include "day0/synth/synth_checkpoint.h"

#include <stdlib.h>
#include <sys/statvfs.h>

#include <cstring>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "day0/core/atomic_file.h"
#include "day0/core/checked_math.h"
#include "day0/core/human.h"
#include "day0/core/numeric.h"
#include "day0/io/checkpoint.h"
#include "day0/io/hash_manifest.h"
#include "day0/io/quantize.h"
#include "day0/io/safetensors_writer.h"
#include "day0/io/sha256.h"
#include "day0/model/config_writer.h"
#include "day0/synth/weight_init.h"

namespace day0 {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_norm(const TensorSpec& t) {
  return t.role == TensorRole::kNorm;
}

// Both tensors of a quantized pair (FP8 weight + scale_inv, MXFP4 blocks + scales) come from one
// quantization; whichever fill runs first computes it, the second takes the rest.
struct QuantizedPair {
  std::once_flag once;
  std::vector<uint8_t> values;
  std::vector<uint8_t> scale_bytes;
};

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

Status copy_into(std::span<uint8_t> out, const std::vector<uint8_t>& bytes, const std::string& name) {
  if (out.size() != bytes.size()) {
    return internal_error(
        fmt::format("synth: tensor {} expects {} bytes, produced {}", name, out.size(), bytes.size()));
  }
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return Status::ok();
}

// The values tensor and the scales tensor of `pair`, each filled by running `compute` (once for both).
template <typename Compute>
void push_pair(const std::shared_ptr<QuantizedPair>& pair, Compute compute, const TensorSpec& values,
               const TensorSpec& scales, std::vector<PendingTensor>& out) {
  PendingTensor pv{values.name, values.dtype, values.shape, nullptr};
  pv.fill = [pair, compute, name = values.name](std::span<uint8_t> o) {
    compute();
    return copy_into(o, pair->values, name);
  };
  PendingTensor ps{scales.name, scales.dtype, scales.shape, nullptr};
  ps.fill = [pair, compute, name = scales.name](std::span<uint8_t> o) {
    compute();
    return copy_into(o, pair->scale_bytes, name);
  };
  out.push_back(std::move(pv));
  out.push_back(std::move(ps));
}

// Plain tensors: N(0, std^2) (norms: 1) in the tensor's dtype.
PendingTensor plain_tensor(const TensorSpec& t, uint64_t seed, float stddev) {
  PendingTensor p{t.name, t.dtype, t.shape, nullptr};
  p.fill = [t, seed, stddev](std::span<uint8_t> out) -> Status {
    const size_t n = static_cast<size_t>(checked_product(t.shape).value_or(0));
    std::vector<float> v = is_norm(t) ? std::vector<float>(n, 1.0f) : normal_values(seed, t.name, n, stddev);
    std::vector<uint8_t> bytes;
    switch (t.dtype) {
      case DType::kF32:
        bytes = as_bytes(v);
        break;
      case DType::kBF16: {
        std::vector<uint16_t> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(v[i]);
        bytes = as_bytes(h);
        break;
      }
      case DType::kF16: {
        std::vector<uint16_t> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = f32_to_f16(v[i]);
        bytes = as_bytes(h);
        break;
      }
      default:
        return unsupported(fmt::format("synth: no generator for {} tensor {}", dtype_name(t.dtype), t.name));
    }
    return copy_into(out, bytes, t.name);
  };
  return p;
}

// A token -> experts table (hash-routed MoE layers, `tid2eid` [vocab, k]): each token's k distinct experts,
// drawn from the stream (seed, name) by a partial shuffle of the n_experts ids.
PendingTensor hash_routing_table(const TensorSpec& t, int64_t n_experts, uint64_t seed) {
  PendingTensor p{t.name, t.dtype, t.shape, nullptr};
  p.fill = [t, n_experts, seed](std::span<uint8_t> out) -> Status {
    const int64_t rows = t.shape[0], k = t.shape[1];
    if (t.shape.size() != 2 || k > n_experts || (t.dtype != DType::kI64 && t.dtype != DType::kI32)) {
      return internal_error(fmt::format("synth: hash routing table {} [{}] of {} for {} experts", t.name,
                                        fmt::join(t.shape, ", "), dtype_name(t.dtype), n_experts));
    }
    WeightRng rng(seed, t.name);
    std::vector<int64_t> ids(static_cast<size_t>(n_experts)), table;  // table [rows, k]
    table.reserve(static_cast<size_t>(rows * k));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t e = 0; e < n_experts; ++e) ids[static_cast<size_t>(e)] = e;
      for (int64_t j = 0; j < k; ++j) {
        const auto pick = j + static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(n_experts - j));
        std::swap(ids[static_cast<size_t>(j)], ids[static_cast<size_t>(pick)]);
        table.push_back(ids[static_cast<size_t>(j)]);
      }
    }
    if (t.dtype == DType::kI64) return copy_into(out, as_bytes(table), t.name);
    return copy_into(out, as_bytes(std::vector<int32_t>(table.begin(), table.end())), t.name);
  };
  return p;
}

void add_fp8_pair(const TensorSpec& w, const TensorSpec& s, const ModelSpec& spec, uint64_t seed,
                  float stddev, std::vector<PendingTensor>& out) {
  auto pair = std::make_shared<QuantizedPair>();
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const int64_t br = spec.weights.block_rows, bc = spec.weights.block_cols;
  // Exponent bytes hold only powers of two: quantize to such scales whenever they are written (nothing lost).
  const bool exponent_bytes = s.dtype == DType::kF8E8M0;
  const bool pow2 = spec.weights.ue8m0_scales || exponent_bytes;
  auto compute = [pair, rows, cols, br, bc, pow2, exponent_bytes, seed, stddev, name = w.name] {
    std::call_once(pair->once, [&] {
      const auto values = normal_values(seed, name, static_cast<size_t>(rows * cols), stddev);
      auto q = quantize_fp8_block(values, rows, cols, br, bc, pow2);
      pair->values = std::move(q.values);
      if (exponent_bytes) {  // powers of two: the byte is the float32 exponent field
        pair->scale_bytes.resize(q.scale_inv.size());
        for (size_t i = 0; i < q.scale_inv.size(); ++i)
          pair->scale_bytes[i] = static_cast<uint8_t>(f32_to_bits(q.scale_inv[i]) >> 23);
      } else {
        pair->scale_bytes = as_bytes(q.scale_inv);
      }
    });
  };
  push_pair(pair, compute, w, s, out);
}

void add_mxfp4_pair(const TensorSpec& b, const TensorSpec& s, uint64_t seed, float stddev,
                    std::vector<PendingTensor>& out) {
  auto pair = std::make_shared<QuantizedPair>();
  const size_t n_values = static_cast<size_t>(checked_product(s.shape).value_or(0)) * 32;
  const std::string stream = b.name.substr(0, b.name.size() - 7);  // the logical weight name
  auto compute = [pair, n_values, seed, stddev, stream] {
    std::call_once(pair->once, [&] {
      auto q = quantize_mxfp4(normal_values(seed, stream, n_values, stddev));
      pair->values = std::move(q.blocks);
      pair->scale_bytes = std::move(q.scales);
    });
  };
  push_pair(pair, compute, b, s, out);
}

// An FP4 projection (`weight` I8 [rows, cols / 2] nibbles) and its E8M0 `weight_scale_inv`
// [rows, cols / group]: the same normal draw as a plain tensor of that name, quantized per group.
void add_fp4_pair(const TensorSpec& w, const TensorSpec& s, uint64_t seed, float stddev,
                  std::vector<PendingTensor>& out) {
  auto pair = std::make_shared<QuantizedPair>();
  const int64_t rows = w.shape[0], cols = 2 * w.shape[1], group = cols / s.shape[1];
  auto compute = [pair, rows, cols, group, seed, stddev, name = w.name] {
    std::call_once(pair->once, [&] {
      auto q = quantize_mxfp4(normal_values(seed, name, static_cast<size_t>(rows * cols), stddev), group);
      pair->values = std::move(q.blocks);
      pair->scale_bytes = std::move(q.scales);
    });
  };
  push_pair(pair, compute, w, s, out);
}

bool block_quantized(const TensorSpec& t) {
  return t.dtype == DType::kF8E4M3 || t.storage == WeightStorage::kFp4Packed;
}

// The block scale of weight `name`: `<name>_scale_inv`, or where a layout renames it (DeepSeek-V4's
// release) `<module>.scale` beside `<module>.weight`.
std::map<std::string, const TensorSpec*>::const_iterator scale_sibling(
    const std::map<std::string, const TensorSpec*>& by_name, const std::string& name) {
  auto s = by_name.find(name + "_scale_inv");
  if (s == by_name.end() && ends_with(name, ".weight"))
    s = by_name.find(name.substr(0, name.size() - 7) + ".scale");
  return s;
}

// Whether `t` is the block scale of a quantized weight (written with it, not on its own).
bool is_block_scale(const std::map<std::string, const TensorSpec*>& by_name, const TensorSpec& t) {
  for (const std::string suffix : {"_scale_inv", ".scale"}) {
    if (!ends_with(t.name, suffix)) continue;
    const std::string base = t.name.substr(0, t.name.size() - suffix.size());
    const auto w = by_name.find(suffix == ".scale" ? base + ".weight" : base);
    if (w != by_name.end() && (suffix == "_scale_inv" || block_quantized(*w->second))) return true;
  }
  return false;
}

Result<std::vector<PendingTensor>> pending_tensors(const TensorManifest& manifest, const ModelSpec& spec,
                                                   const SynthOptions& options) {
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto& t : manifest.tensors) by_name[t.name] = &t;
  std::vector<PendingTensor> out;
  for (const auto& t : manifest.tensors) {
    if (t.dtype == DType::kF8E4M3) {
      const auto s = scale_sibling(by_name, t.name);
      if (s == by_name.end() || t.shape.size() != 2) {
        return unsupported("synth: FP8 tensor " + t.name + " without a 2-D block scale sibling");
      }
      add_fp8_pair(t, *s->second, spec, options.seed, options.init_std, out);
      continue;
    }
    if (t.storage == WeightStorage::kFp4Packed) {
      const auto s = scale_sibling(by_name, t.name);
      if (s == by_name.end() || t.shape.size() != 2 || s->second->shape.size() != 2) {
        return unsupported("synth: FP4 tensor " + t.name + " without a 2-D scale sibling");
      }
      add_fp4_pair(t, *s->second, options.seed, options.init_std, out);
      continue;
    }
    if (is_block_scale(by_name, t)) continue;
    if (ends_with(t.name, "_blocks") && t.dtype == DType::kU8) {
      const auto s = by_name.find(t.name.substr(0, t.name.size() - 7) + "_scales");
      if (s == by_name.end()) return unsupported("synth: MXFP4 blocks " + t.name + " without scales");
      add_mxfp4_pair(t, *s->second, options.seed, options.init_std, out);
      continue;
    }
    if (ends_with(t.name, "_scales") && by_name.count(t.name.substr(0, t.name.size() - 7) + "_blocks"))
      continue;
    if (t.slot == WeightSlot::kHashRoutingTable && spec.moe) {
      out.push_back(hash_routing_table(t, spec.moe->n_experts, options.seed));
      continue;
    }
    out.push_back(plain_tensor(t, options.seed, options.init_std));
  }
  return out;
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return io_error(path + ": cannot write");
  return Status::ok();
}

uint64_t meminfo_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;  // unknown
}

// Refuses sizes the machine cannot hold before anything is allocated or written: the shards need
// `total` bytes of disk, and generating the largest tensor needs about 12 bytes per value (float32
// values, the encoded bytes, the output mapping).
Status check_synth_resources(const fs::path& parent, uint64_t total, uint64_t largest_numel, int64_t params) {
  struct statvfs vfs {};
  if (::statvfs(parent.c_str(), &vfs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (total > free_bytes) {
      return resource_exhausted(fmt::format(
          "the miniature has {} parameters in {} of tensors, but {} has {} free: choose smaller sizes",
          params, human_bytes(static_cast<double>(total)), parent.string(),
          human_bytes(static_cast<double>(free_bytes))));
    }
  }
  const uint64_t working = checked_mul(largest_numel, uint64_t{12}).value_or(UINT64_MAX);
  const uint64_t available = meminfo_available_bytes();
  if (available > 0 && working > available) {
    return resource_exhausted(fmt::format(
        "generating the largest tensor ({} values) needs about {} of memory, {} is available: choose "
        "smaller sizes",
        largest_numel, human_bytes(static_cast<double>(working)),
        human_bytes(static_cast<double>(available))));
  }
  return Status::ok();
}

}  // namespace

Result<TensorManifest> synth_tensor_list(const ModelSpec& spec, bool mtp_layers) {
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(spec));
  if (!mtp_layers) std::erase_if(manifest.tensors, [](const TensorSpec& t) { return t.mtp; });
  // Under the names the family's releases ship, where they differ from the table's.
  if (const StoredLayout* layout = release_layout(manifest)) return to_stored_layout(manifest, *layout);
  return manifest;
}

Result<SynthResult> write_synthetic_checkpoint(const ModelSpec& spec, const SynthOptions& options,
                                               const std::string& out_dir) {
  if (spec.weights.packed.bits != 0) {
    return unsupported(
        "synth writes unquantized (or FP8 / MXFP4) checkpoints; for a pack-quantized one, synth an "
        "unquantized model and run `day0 quantize` on it");
  }
  if (options.n_shards < 1 || options.n_shards > 10000)
    return invalid_argument("--shards must be in 1..10000");
  D0_ASSIGN_OR_RETURN(const std::filesystem::path target, check_output_folder(out_dir));
  const std::filesystem::path parent = target.parent_path();

  D0_ASSIGN_OR_RETURN(TensorManifest tensors, synth_tensor_list(spec, options.mtp_layers));
  D0_ASSIGN_OR_RETURN(auto pending, pending_tensors(tensors, spec, options));

  SynthResult result;
  result.spec = spec;
  result.dir = target.string();
  result.n_tensors = static_cast<int64_t>(tensors.tensors.size());
  for (const auto& t : tensors.tensors) {
    if (t.mtp) {
      ++result.n_mtp_tensors;
    } else {
      result.params += t.params;
    }
  }

  uint64_t total = 0, largest = 0, largest_numel = 0;
  for (const auto& p : pending) {
    const uint64_t bytes = *tensor_byte_size(p.dtype, p.shape);
    total += bytes;
    largest = std::max(largest, bytes);
    largest_numel = std::max(largest_numel, checked_product(p.shape).value_or(0));
  }
  result.tensor_bytes = total;
  D0_RETURN_IF_ERROR(check_synth_resources(parent, total, largest_numel, result.params));
  // Greedy packing closes a shard only when the next tensor would pass the cap, so every closed shard
  // holds more than total / n_shards: at most n_shards shards.
  const uint64_t cap = (total + options.n_shards - 1) / static_cast<uint64_t>(options.n_shards) + largest;
  CheckpointWriter writer(std::max<uint64_t>(1, cap));
  writer.set_metadata("format", "pt");
  for (auto& p : pending) D0_RETURN_IF_ERROR(writer.add(std::move(p)));

  // A mkdtemp sibling, removed on every return, exception and SIGINT/SIGTERM; what a SIGKILL left
  // behind is removed here by the next run.
  remove_stale_temps(parent, target.filename().string());
  D0_ASSIGN_OR_RETURN(TempDir tmp_dir, TempDir::create(parent, target.filename().string()));
  const std::string tmp = tmp_dir.path().string();
  auto cleanup = [](Status st) { return st; };
  if (auto st = write_text(tmp + "/config.json", to_hf_config(spec).dump(2) + "\n"); !st) return cleanup(st);
  auto shards = writer.write(tmp);
  if (!shards.is_ok()) return cleanup(shards.status());
  result.shards = *shards;

  std::vector<std::string> names = result.shards;
  names.push_back("config.json");
  names.push_back(kSafetensorsIndexName);
  std::vector<std::string> paths;
  for (const auto& n : names) paths.push_back(tmp + "/" + n);
  auto digests = sha256_files(paths, 2);
  std::map<std::string, std::string> sums;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!digests[i].is_ok()) return cleanup(digests[i].status());
    sums[names[i]] = *digests[i];
  }
  if (auto st = write_sha256sums(tmp + "/" + kSha256SumsName, sums); !st) return cleanup(st);

  D0_RETURN_IF_ERROR(tmp_dir.commit_to(target));  // replaces the empty directory the caller allowed
  return result;
}

Result<SynthResult> synthesize_miniature(const ModelSpec& full, const MiniatureOptions& dims,
                                         const SynthOptions& options, const std::string& out_dir) {
  D0_ASSIGN_OR_RETURN(ModelSpec mini, make_miniature_spec(full, dims));
  return write_synthetic_checkpoint(mini, options, out_dir);
}

}  // namespace day0
