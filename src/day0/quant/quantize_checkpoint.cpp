#include "day0/quant/quantize_checkpoint.h"

#include <fnmatch.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/core/atomic_file.h"
#include "day0/core/error.h"
#include "day0/core/json_reader.h"
#include "day0/core/numeric.h"
#include "day0/io/checkpoint.h"
#include "day0/io/dequant.h"
#include "day0/io/hash_manifest.h"
#include "day0/io/progress.h"
#include "day0/io/safetensors_writer.h"
#include "day0/io/sha256.h"
#include "day0/model/catalog.h"
#include "day0/model/packed_int_config.h"
#include "day0/model/tensor_manifest.h"
#include "day0/quant/pack_quantized.h"

namespace day0 {

namespace fs = std::filesystem;

namespace {

// Hugging Face shards are at most 5 GB by default; so are ours.
constexpr uint64_t kMaxShardBytes = uint64_t{5} << 30;

std::string module_of(const std::string& tensor) {
  const std::string tail = ".weight";
  return tensor.ends_with(tail) ? tensor.substr(0, tensor.size() - tail.size()) : tensor;
}

bool skip_matches(const std::vector<std::string>& patterns, const std::string& module) {
  for (const auto& p : patterns) {
    if (p.starts_with("re:")) {
      if (matches_module_pattern(p, module)) return true;
    } else if (fnmatch(p.c_str(), module.c_str(), 0) == 0 ||
               fnmatch(p.c_str(), (module + ".weight").c_str(), 0) == 0) {
      return true;
    }
  }
  return false;
}

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

template <typename T>
void put_bytes(std::span<uint8_t> out, const std::vector<T>& values) {
  D0_CHECK(out.size() == values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
}

// One projection being quantized: computed by whichever of its output tensors the writer reaches
// first, dropped once all of them are written.
struct PackJob {
  std::string stem;
  TensorView source;
  int64_t rows = 0, cols = 0;
  std::mutex mutex;
  std::shared_ptr<const GroupQuantized> result;
  int remaining = 0;
};

Result<std::shared_ptr<const GroupQuantized>> quantized_of(PackJob& job, const PackArgs& args,
                                                           ByteProgress* progress) {
  std::lock_guard lock(job.mutex);
  if (!job.result) {
    D0_ASSIGN_OR_RETURN(std::vector<float> w, tensor_to_f32(job.source));
    for (size_t i = 0; i < w.size(); ++i) {
      if (!std::isfinite(w[i])) {
        return invalid_argument(fmt::format(
            "tensor {}.weight: element {} is {}; cannot quantize a non-finite weight", job.stem, i, w[i]));
      }
    }
    job.result = std::make_shared<const GroupQuantized>(quantize_groups(w, job.rows, job.cols, args));
    if (progress) progress->add(job.source.data.size());
  }
  auto out = job.result;
  if (--job.remaining == 0) job.result.reset();
  return out;
}

std::vector<uint8_t> scale_bytes(const std::vector<float>& scale, DType dtype) {
  std::vector<uint8_t> out;
  if (dtype == DType::kF32) {
    out.resize(scale.size() * 4);
    std::memcpy(out.data(), scale.data(), out.size());
    return out;
  }
  out.resize(scale.size() * 2);
  for (size_t i = 0; i < scale.size(); ++i) {
    const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(scale[i]) : f32_to_f16(scale[i]);
    std::memcpy(out.data() + i * 2, &h, 2);
  }
  return out;
}

Status copy_one_file(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return io_error(fmt::format("{}: cannot copy to {}: {}", from.string(), to.string(), ec.message()));
  return Status::ok();
}

// config.json through the bounded reader (size, depth, finite numbers), as every outside JSON.
Result<nlohmann::json> read_json(const fs::path& path) {
  D0_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(path, kConfigJsonLimits));
  if (!j.is_object()) return invalid_argument(path.string() + ": not a JSON object");
  return j;
}

}  // namespace

Result<std::vector<float>> quantize_roundtrip(std::span<const float> weight, int64_t rows, int64_t cols,
                                              const QuantizeOptions& options, DType scale_dtype) {
  if (options.group_size <= 0 || cols % options.group_size != 0) {
    return invalid_argument(
        fmt::format("group size {} does not divide {} columns", options.group_size, cols));
  }
  const PackArgs args{options.bits, options.group_size, options.symmetric, scale_dtype};
  const GroupQuantized q = quantize_groups(weight, rows, cols, args);
  std::vector<float> out(weight.size());
  dequantize_groups(q.q, rows, cols, q.scale, q.zero_point, options.group_size, out);
  return out;
}

Result<QuantizeResult> quantize_checkpoint(const std::string& model, const std::string& out_dir,
                                           const QuantizeOptions& options) {
  if (options.bits != 4 && options.bits != 8) {
    return invalid_argument(fmt::format("--to: int{} is not supported (int4, int8)", options.bits));
  }
  if (options.group_size != 32 && options.group_size != 64 && options.group_size != 128) {
    return invalid_argument(fmt::format("--group {}: expected 32, 64 or 128", options.group_size));
  }
  if (options.head_bits != 0 && options.head_bits != 8) {
    return invalid_argument(fmt::format("--head: int{} is not supported (keep, int8)", options.head_bits));
  }
  for (const auto& p : options.skip) {
    if (auto st = validate_module_pattern(p); !st) {
      return invalid_argument(
          fmt::format("--skip \"{}\": not a valid regular expression: {}", p, st.message()));
    }
  }
  D0_ASSIGN_OR_RETURN(ResolvedModel resolved, resolve_model(model));
  if (resolved.from_catalog || resolved.folder.empty()) {
    return invalid_argument(
        fmt::format("{} is a catalog entry without weights; pass a checkpoint folder", model));
  }
  const ModelSpec& spec = resolved.spec;
  if (spec.weights.packed.bits != 0 || spec.weights.format == WeightFormat::kFp8Block ||
      spec.weights.format == WeightFormat::kMxfp4) {
    return invalid_argument(
        fmt::format("{}: the checkpoint is already quantized; quantize an unquantized one", resolved.source));
  }
  D0_ASSIGN_OR_RETURN(const std::filesystem::path target, check_output_folder(out_dir));
  std::error_code ec;
  const std::filesystem::path parent = target.parent_path();

  const bool pack_head = options.head_bits != 0;
  const std::string head_stem = spec.multimodal_wrapper ? "language_model.lm_head" : "lm_head";
  if (pack_head && spec.multimodal_wrapper) {
    return unsupported(fmt::format(
        "{}: --head int8 writes a text model's lm_head; this checkpoint wraps its language model ({})",
        resolved.source, spec.model_type));
  }
  if (pack_head && spec.hidden_size % options.group_size != 0) {
    return invalid_argument(fmt::format(
        "--head int8: --group {} does not divide the LM head's {} columns (hidden_size); choose a group "
        "size that does",
        options.group_size, spec.hidden_size));
  }
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(spec));
  D0_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(resolved.folder.string()));
  // The output is written under the weight table's names, with a config whose module lists name them.
  if (const StoredLayout* layout =
          stored_layout_in_use(manifest, [&](const std::string& name) { return ckpt.contains(name); })) {
    return unsupported(fmt::format(
        "{}: model_type {} holds its tensors under {}; day0 quantize writes the weight table's own names "
        "only, which this model_type's loaders do not all read",
        resolved.source, spec.model_type, layout->name));
  }

  // Which projections are packed, decided from the weight table's storage and roles.
  std::set<std::string> packed_stems;
  std::set<std::string> ignore;
  if (!pack_head) ignore.insert(head_stem);
  for (const TensorSpec& t : manifest.tensors) {
    if (pack_head && t.role == TensorRole::kLmHead) continue;
    const bool projection = t.storage == WeightStorage::kProjection && t.shape.size() == 2;
    const bool linear_kept = t.role == TensorRole::kRouter || t.role == TensorRole::kLmHead ||
                             t.slot == WeightSlot::kSharedExpertGate || t.slot == WeightSlot::kIndexerWeights;
    if (!projection) {
      if (linear_kept && t.shape.size() == 2 && t.name.ends_with(".weight")) ignore.insert(module_of(t.name));
      continue;
    }
    const std::string stem = module_of(t.name);
    if (t.mtp || t.slot == WeightSlot::kSharedExpertGate || skip_matches(options.skip, stem)) {
      ignore.insert(stem);
      continue;
    }
    if (t.shape[1] % options.group_size != 0) {
      return invalid_argument(fmt::format(
          "tensor {}: --group {} does not divide its {} columns (shape [{}, {}]); choose a group size that "
          "divides every quantized row, or --skip {}",
          t.name, options.group_size, t.shape[1], t.shape[0], t.shape[1], stem));
    }
    packed_stems.insert(stem);
  }
  if (pack_head) packed_stems.insert(head_stem);

  QuantizeResult result;
  result.spec = spec;
  result.spec.weights.packed = PackedIntSpec{options.bits,
                                             options.group_size,
                                             options.symmetric,
                                             {"Linear"},
                                             std::vector<std::string>(ignore.begin(), ignore.end())};
  if (pack_head) {
    // An untied head: the embedding stays as stored for the lookup, the head is its own packed copy.
    result.spec.tie_word_embeddings = false;
    result.spec.weights.packed.head_bits = options.head_bits;
    result.spec.weights.packed.head_target = head_stem;
  }
  result.ignore = result.spec.weights.packed.ignore;
  // The output's own weight table must pack exactly the chosen projections.
  D0_ASSIGN_OR_RETURN(TensorManifest out_manifest, build_tensor_manifest(result.spec));
  std::set<std::string> table_packed;
  for (const TensorSpec& t : out_manifest.tensors) {
    if (t.name.ends_with(".weight_packed")) table_packed.insert(t.name.substr(0, t.name.size() - 14));
  }
  if (table_packed != packed_stems) {
    return internal_error(
        "quantize: the output config's targets and ignore list select other projections "
        "than the ones chosen");
  }

  std::map<std::string, std::vector<int64_t>> expected_shape;
  for (const TensorSpec& t : manifest.tensors) expected_shape[t.name] = t.shape;
  // [V, H]: the head packed from a stored lm_head.weight (untied, or a tied checkpoint's copy) or the
  // embedding table.
  expected_shape[head_stem + ".weight"] = {spec.vocab_size, spec.hidden_size};
  // Copies of the views (a shard's tensors() is a fresh list); the mapping outlives them.
  std::optional<TensorView> head_source, embedding_source;
  std::string embedding_name;
  for (const TensorSpec& t : manifest.tensors) {
    if (t.role == TensorRole::kEmbedding && t.slot == WeightSlot::kEmbedding) embedding_name = t.name;
  }

  uint64_t total_in = 0;
  for (const auto& shard : ckpt.shards()) {
    for (const TensorView& t : shard.tensors()) total_in += t.data.size();
  }
  std::unique_ptr<ByteProgress> progress;
  if (options.progress) {
    progress = std::make_unique<ByteProgress>("quantizing", total_in, options.progress,
                                              isatty(fileno(options.progress)) != 0);
  }
  ByteProgress* bar = progress.get();

  CheckpointWriter writer(kMaxShardBytes, /*single_file=*/true);
  writer.set_metadata("format", "pt");
  std::vector<std::shared_ptr<PackJob>> jobs;
  const PackArgs base_args{options.bits, options.group_size, options.symmetric, DType::kBF16};
  std::set<std::string> seen_stems;
  // Packs `t` as `stem`'s weight_packed / weight_scale / weight_zero_point / weight_shape.
  const auto add_packed = [&](const std::string& stem, const TensorView& t,
                              const std::string& where) -> Status {
    const std::string name = stem + ".weight";
    const std::vector<int64_t>& want = expected_shape.at(name);
    const std::vector<int64_t> shape(t.shape.begin(), t.shape.end());
    if (shape != want) {
      return invalid_argument(fmt::format("{}: tensor {}: expected shape [{}], found [{}]", where, name,
                                          fmt::join(want, ", "), fmt::join(shape, ", ")));
    }
    if (!is_float(t.dtype)) {
      return invalid_argument(fmt::format("{}: tensor {}: expected F32, BF16 or F16 to quantize, found {}",
                                          where, name, dtype_name(t.dtype)));
    }
    seen_stems.insert(stem);
    auto job = std::make_shared<PackJob>();
    job->stem = stem;
    job->source = t;
    job->rows = shape[0];
    job->cols = shape[1];
    job->remaining = options.symmetric ? 2 : 3;
    jobs.push_back(job);
    PackArgs args = base_args;
    args.bits = packed_bits_of(result.spec.weights.packed, stem);
    args.scale_dtype = t.dtype;  // compressed-tensors keeps scales in the weight's dtype
    const int64_t rows = shape[0], cols = shape[1], per_word = pack_factor(args.bits);
    const int64_t groups = cols / options.group_size;
    D0_RETURN_IF_ERROR(writer.add(PendingTensor{stem + ".weight_packed",
                                                DType::kI32,
                                                {rows, (cols + per_word - 1) / per_word},
                                                [job, args, bar](std::span<uint8_t> out) -> Status {
                                                  D0_ASSIGN_OR_RETURN(auto q, quantized_of(*job, args, bar));
                                                  put_bytes(out,
                                                            pack_rows(q->q, job->rows, job->cols, args.bits));
                                                  return Status::ok();
                                                }}));
    D0_RETURN_IF_ERROR(writer.add(PendingTensor{
        stem + ".weight_scale", t.dtype, {rows, groups}, [job, args, bar](std::span<uint8_t> out) -> Status {
          D0_ASSIGN_OR_RETURN(auto q, quantized_of(*job, args, bar));
          put_bytes(out, scale_bytes(q->scale, args.scale_dtype));
          return Status::ok();
        }}));
    if (!options.symmetric) {
      D0_RETURN_IF_ERROR(writer.add(
          PendingTensor{stem + ".weight_zero_point",
                        DType::kI32,
                        {(rows + per_word - 1) / per_word, groups},
                        [job, args, bar, groups](std::span<uint8_t> out) -> Status {
                          D0_ASSIGN_OR_RETURN(auto q, quantized_of(*job, args, bar));
                          put_bytes(out, pack_columns(q->zero_point, job->rows, groups, args.bits));
                          return Status::ok();
                        }}));
    }
    D0_RETURN_IF_ERROR(writer.add(tensor_i64(stem + ".weight_shape", {2}, {rows, cols})));
    ++result.n_quantized;
    result.quantized_params += rows * cols;
    return Status::ok();
  };
  for (const auto& shard : ckpt.shards()) {
    for (const TensorView& t : shard.tensors()) {
      const std::string name(t.name);
      result.bytes_in += t.data.size();
      const std::string stem = module_of(name);
      if (name == embedding_name) embedding_source = t;
      if (!name.ends_with(".weight") || !packed_stems.count(stem)) {
        // Kept as stored: a view into the mapping, copied when the writer reaches it.
        const TensorView view = t;
        D0_RETURN_IF_ERROR(
            writer.add(PendingTensor{name, t.dtype, std::vector<int64_t>(t.shape.begin(), t.shape.end()),
                                     [view, bar](std::span<uint8_t> out) -> Status {
                                       if (out.size() != view.data.size())
                                         return internal_error("quantize: size changed while copying");
                                       if (!out.empty())
                                         std::memcpy(out.data(), view.data.data(), out.size());
                                       if (bar) bar->add(out.size());
                                       return Status::ok();
                                     }}));
        ++result.n_kept;
        continue;
      }
      if (stem == head_stem) {
        head_source = t;  // packed after the loop, whichever source it comes from
        continue;
      }
      D0_RETURN_IF_ERROR(add_packed(stem, t, shard.path()));
    }
  }
  if (pack_head) {
    const std::optional<TensorView>& from = head_source ? head_source : embedding_source;
    if (!from) {
      return invalid_argument(fmt::format("{}: --head int8: neither {}.weight nor the embedding {} is stored",
                                          resolved.folder.string(), head_stem, embedding_name));
    }
    D0_RETURN_IF_ERROR(add_packed(head_stem, *from, resolved.folder.string()));
    result.head_params = spec.vocab_size * spec.hidden_size;
  }
  for (const auto& stem : packed_stems) {
    if (!seen_stems.count(stem) && stem != head_stem) {
      return invalid_argument(
          fmt::format("{}: tensor {}.weight is missing from the checkpoint", resolved.folder.string(), stem));
    }
  }
  result.bytes_out = writer.data_bytes();

  remove_stale_temps(parent, target.filename().string());
  D0_ASSIGN_OR_RETURN(TempDir tmp_dir, TempDir::create(parent, target.filename().string()));
  const fs::path tmp = tmp_dir.path();
  D0_ASSIGN_OR_RETURN(nlohmann::json config, read_json(resolved.folder / "config.json"));
  config["quantization_config"] = compressed_tensors_config(result.spec.weights.packed);
  if (pack_head) config["tie_word_embeddings"] = false;
  D0_RETURN_IF_ERROR(write_file_atomic((tmp / "config.json").string(), config.dump(2) + "\n"));
  // Tokenizer, chat template, generation config...: everything but the weights, the config and the
  // hash list (rewritten below).
  for (const auto& entry : fs::directory_iterator(resolved.folder, ec)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || file.starts_with(".") || file.ends_with(".safetensors") ||
        file == "config.json" || file == kSafetensorsIndexName || file == kSha256SumsName) {
      continue;
    }
    D0_RETURN_IF_ERROR(copy_one_file(entry.path(), tmp / file));
  }
  D0_ASSIGN_OR_RETURN(result.shards, writer.write(tmp.string()));
  if (bar) bar->finish();

  std::vector<std::string> names = result.shards;
  names.push_back("config.json");
  if (fs::exists(tmp / kSafetensorsIndexName, ec)) names.push_back(kSafetensorsIndexName);
  std::vector<std::string> paths;
  for (const auto& n : names) paths.push_back((tmp / n).string());
  auto digests = sha256_files(paths, 2);
  std::map<std::string, std::string> sums;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!digests[i].is_ok()) return digests[i].status();
    sums[names[i]] = *digests[i];
  }
  D0_RETURN_IF_ERROR(write_sha256sums((tmp / kSha256SumsName).string(), sums));
  D0_RETURN_IF_ERROR(tmp_dir.commit_to(target));
  result.dir = target.string();
  return result;
}

}  // namespace day0
