#include "day0/io/checkpoint_verify.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "day0/core/human.h"
#include "day0/io/checkpoint.h"
#include "day0/io/hash_manifest.h"
#include "day0/io/mapped_file.h"
#include "day0/io/progress.h"
#include "day0/io/safetensors_header.h"
#include "day0/io/sha256.h"
#include "day0/io/value_scan.h"

namespace day0 {

namespace fs = std::filesystem;

namespace {

std::string describe(DType dtype, std::span<const int64_t> shape) {
  return fmt::format("{} [{}]", dtype_name(dtype), fmt::join(shape, ", "));
}

// The decoder layer a tensor name belongs to ("model.layers.61.mlp..." -> 61), -1 if none.
int64_t layer_of(const std::string& name) {
  const std::string key = "layers.";
  const size_t at = name.find(key);
  if (at == std::string::npos) return -1;
  int64_t layer = 0;
  size_t i = at + key.size();
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
    layer = layer * 10 + (name[i] - '0');
    if (layer > 1'000'000) return -1;
  }
  return layer;
}

struct OpenedShard {
  std::optional<MappedFile> map;
  std::optional<SafetensorsHeader> header;
};

struct Located {
  size_t shard;
  const SafetensorsEntry* entry;
};

class Verifier {
 public:
  Verifier(const CheckpointLayout& layout, const VerifyOptions& options)
      : layout_(layout), options_(options) {}

  Result<VerifyReport> run() {
    report_.dir = layout_.dir;
    report_.sharded = layout_.index.has_value();
    opened_.resize(layout_.shards.size());
    for (size_t i = 0; i < layout_.shards.size(); ++i) open_shard(i);
    collect_tensors();
    if (layout_.index) check_index();
    if (options_.manifest != nullptr) check_manifest();
    if (options_.check_hashes) D0_RETURN_IF_ERROR(check_hashes());
    return std::move(report_);
  }

 private:
  void add(Finding f) { report_.findings.push_back(std::move(f)); }

  void open_shard(size_t i) {
    const std::string& name = layout_.shards[i];
    ShardReport sr;
    sr.name = name;
    const std::string path = layout_.shard_path(name);
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      sr.status = "missing";
      size_t named = 0;
      if (layout_.index) {
        for (const auto& [t, s] : layout_.index->weight_map) named += s == name;
      }
      add({"structure", "missing_shard", true, name, "", "present", "absent",
           fmt::format("shard named by the index for {} tensors is absent", named)});
      report_.shards.push_back(sr);
      return;
    }
    auto map = MappedFile::open(path);
    if (!map.is_ok()) {
      sr.status = "invalid";
      add({"structure", "unreadable_shard", true, name, "", "a readable file", "unreadable",
           map.status().message()});
      report_.shards.push_back(sr);
      return;
    }
    sr.file_size = map->size();
    const auto bytes = map->bytes();
    const std::string_view head(reinterpret_cast<const char*>(bytes.data()),
                                std::min<size_t>(bytes.size(), 1024));
    if (looks_like_lfs_pointer(head)) {
      sr.status = "lfs_pointer";
      std::string want = "safetensors data";
      if (auto ptr = parse_lfs_pointer(head, path); ptr.is_ok() && ptr->size) {
        want = fmt::format("{} bytes of safetensors data", *ptr->size);
      }
      add({"structure", "lfs_pointer", true, name, "", want,
           fmt::format("a Git LFS pointer of {} bytes", sr.file_size),
           "the shard is a Git LFS pointer, not the data: fetch it (git lfs pull)"});
      report_.shards.push_back(sr);
      return;
    }
    auto header = parse_safetensors_header(bytes, map->size(), /*allow_truncated_data=*/true);
    if (!header.is_ok()) {
      const bool cut = header.status().code() == StatusCode::kDataLoss;
      sr.status = cut ? "truncated" : "invalid";
      add({"structure", cut ? "truncated_shard" : "invalid_header", true, name, "",
           cut ? "a complete header" : "a valid safetensors header", fmt::format("{} bytes", sr.file_size),
           header.status().to_string()});
      report_.shards.push_back(sr);
      return;
    }
    sr.n_tensors = static_cast<int64_t>(header->tensors.size());
    for (const auto& t : header->tensors) sr.tensor_bytes += t.byte_size();
    if (header->truncated) {
      sr.status = "truncated";
      std::vector<std::string> cut;
      for (const auto& t : header->tensors) {
        if (t.end > header->data_size) cut.push_back(t.name);
      }
      add({"structure", "truncated_shard", true, name, cut.front(),
           fmt::format("{} bytes", header->expected_file_size), fmt::format("{} bytes", sr.file_size),
           fmt::format("file ends {} bytes early; {} tensor(s) cut from this one on",
                       header->expected_file_size - sr.file_size, cut.size())});
    }
    opened_[i].map = std::move(map).value();
    opened_[i].header = std::move(header).value();
    report_.shards.push_back(sr);
  }

  void collect_tensors() {
    for (size_t i = 0; i < opened_.size(); ++i) {
      if (!opened_[i].header) continue;
      for (const auto& entry : opened_[i].header->tensors) {
        const auto [it, inserted] = where_.emplace(entry.name, Located{i, &entry});
        if (!inserted) {
          add({"structure", "duplicate_tensor", true, layout_.shards[i], entry.name,
               "stored once (in " + layout_.shards[it->second.shard] + ")",
               "stored again in " + layout_.shards[i], "the same tensor name appears in two shards"});
        }
      }
    }
    report_.n_tensors = static_cast<int64_t>(where_.size());
  }

  bool shard_readable(const std::string& shard) const {
    const auto it = std::find(layout_.shards.begin(), layout_.shards.end(), shard);
    return it != layout_.shards.end() &&
           opened_[static_cast<size_t>(it - layout_.shards.begin())].header.has_value();
  }

  void check_index() {
    const auto& index = *layout_.index;
    for (const auto& [name, shard] : index.weight_map) {
      if (!shard_readable(shard)) continue;  // the shard's own finding covers it
      const auto it = where_.find(name);
      if (it == where_.end()) {
        add({"structure", "index_mismatch", true, shard, name, "in " + shard,
             "absent from every shard header", "the index names a tensor its shard does not hold"});
      } else if (layout_.shards[it->second.shard] != shard) {
        add({"structure", "index_mismatch", true, shard, name, "in " + shard,
             "in " + layout_.shards[it->second.shard], "the index points to the wrong shard"});
      }
    }
    uint64_t total = 0;
    bool complete = true;
    for (size_t i = 0; i < opened_.size(); ++i) {
      if (!opened_[i].header) {
        complete = false;
        continue;
      }
      for (const auto& entry : opened_[i].header->tensors) {
        total += entry.byte_size();
        if (!index.weight_map.count(entry.name)) {
          add({"structure", "unindexed_tensor", true, layout_.shards[i], entry.name,
               "listed in the weight_map", "only in the shard header",
               "loaders that follow the index never see this tensor"});
        }
      }
    }
    if (complete && index.total_size && *index.total_size != total) {
      add({"structure", "total_size_mismatch", false, "", "", fmt::format("{} bytes", *index.total_size),
           fmt::format("{} bytes", total),
           "metadata.total_size differs from the sum of the tensors (informational)"});
    }
  }

  void check_manifest() {
    // Under the names this checkpoint uses where the table allows another layout (stored_layouts).
    TensorManifest manifest = *options_.manifest;
    adopt_stored_layout(manifest, [&](const std::string& name) { return where_.count(name) != 0; });
    report_.n_manifest_tensors = static_cast<int64_t>(manifest.tensors.size());
    std::set<std::string> expected_names;
    int64_t n_layers = 0;
    for (const auto& spec : manifest.tensors) {
      if (!spec.mtp) n_layers = std::max(n_layers, spec.layer + 1);
      if (spec.mtp) ++report_.n_mtp_tensors;
    }
    for (const auto& spec : manifest.tensors) {
      expected_names.insert(spec.name);
      std::string want = describe(spec.dtype, spec.shape);
      for (DType also : spec.also_accepted) {
        want.insert(dtype_name(spec.dtype).size(), fmt::format(" or {}", dtype_name(also)));
      }
      const auto it = where_.find(spec.name);
      if (it == where_.end()) {
        std::string shard;
        std::string why = "the model needs this tensor and no shard holds it";
        if (layout_.index) {
          if (const auto m = layout_.index->weight_map.find(spec.name);
              m != layout_.index->weight_map.end()) {
            shard = m->second;
            if (!shard_readable(shard)) why = "its shard " + shard + " is missing or unreadable";
          }
        }
        if (spec.mtp) {
          // Releases repackaged for inference often drop the MTP layers; decoding does not need them.
          add({"structure", "missing_mtp_tensor", false, shard, spec.name, want, "absent",
               "a multi-token-prediction tensor the config declares (num_nextn_predict_layers); plain "
               "decoding does not read it (informational)"});
          continue;
        }
        add({"structure", "missing_tensor", true, shard, spec.name, want, "absent", why});
        continue;
      }
      const auto& entry = *it->second.entry;
      const std::string found = describe(entry.dtype, entry.shape);
      const bool shape_ok =
          std::equal(entry.shape.begin(), entry.shape.end(), spec.shape.begin(), spec.shape.end());
      // The weight table lists the dtypes publishers use (F32 routers inside BF16 checkpoints, ...).
      if (!shape_ok || !spec.accepts(entry.dtype)) {
        add({"structure", shape_ok ? "dtype_mismatch" : "shape_mismatch", true,
             layout_.shards[it->second.shard], spec.name, want, found,
             shape_ok ? "wrong dtype" : "wrong shape"});
      }
    }
    std::map<std::string, const TensorSpec*> unused;
    for (const auto& spec : manifest.unused) unused[spec.name] = &spec;
    for (const auto& [name, loc] : where_) {
      if (expected_names.count(name)) continue;
      if (const auto u = unused.find(name); u != unused.end()) {
        // Written by transformers' save_pretrained, never read (the gate/up rows transformers sizes
        // for zero-computation experts): accepted with the shape and dtype transformers gives it.
        const TensorSpec& spec = *u->second;
        const bool shape_ok = std::equal(loc.entry->shape.begin(), loc.entry->shape.end(), spec.shape.begin(),
                                         spec.shape.end());
        if (!shape_ok || !spec.accepts(loc.entry->dtype)) {
          add({"structure", shape_ok ? "dtype_mismatch" : "shape_mismatch", true, layout_.shards[loc.shard],
               name, describe(spec.dtype, spec.shape), describe(loc.entry->dtype, loc.entry->shape),
               "a tensor transformers writes but the model never reads, with another shape or dtype"});
        }
        continue;
      }
      // Dropped by transformers on load (an mtp.* prediction module): not the model's, not an error.
      // (A plain loop: clang 14 cannot capture the structured binding `name` in a lambda.)
      bool ignored = false;
      for (const std::string& p : manifest.ignored_prefixes) ignored = ignored || name.starts_with(p);
      if (ignored) continue;
      const int64_t layer = layer_of(name);
      std::string why = "not part of the model's tensor manifest";
      if (layer >= n_layers && n_layers > 0) {
        why = fmt::format("layer {} is past the model's last layer {} (a multi-token-prediction layer?)",
                          layer, n_layers - 1);
      }
      if (options_.allow_extra) why += "; allowed by --allow-extra";
      Finding f{"structure",
                "extra_tensor",
                !options_.allow_extra,
                layout_.shards[loc.shard],
                name,
                "absent",
                describe(loc.entry->dtype, loc.entry->shape),
                why};
      f.layer = layer;
      add(std::move(f));
    }
  }

  Status check_hashes() {
    HashManifest expected;
    std::string source = options_.hashes_path;
    std::error_code ec;
    if (source.empty() && fs::exists(layout_.dir + "/" + kSha256SumsName, ec)) {
      source = layout_.dir + "/" + kSha256SumsName;
    }
    if (!source.empty()) {
      auto loaded = load_hash_manifest(source);
      if (!loaded.is_ok()) return loaded.status();
      expected = std::move(loaded).value();
      report_.hash_source = source;
    }
    // Files to hash: every present shard, plus other files the list names that exist beside them
    // (config.json, tokenizer files), plus the index and config when writing a new list.
    std::vector<std::string> names;
    std::vector<ShardReport*> reports;
    // Shards that are not regular files (a symlink to /dev/zero, a FIFO) are never read: the
    // structure check already reports them.
    auto hashable = [&](const ShardReport& sr) {
      return sr.status != "missing" && fs::is_regular_file(layout_.shard_path(sr.name), ec);
    };
    for (auto& sr : report_.shards) {
      if (!hashable(sr)) continue;
      names.push_back(sr.name);
    }
    std::set<std::string> extra_names;
    for (const auto& [name, hash] : expected) {
      if (std::find(layout_.shards.begin(), layout_.shards.end(), name) != layout_.shards.end()) continue;
      const bool plain = name.find('/') == std::string::npos && name != "." && name != "..";
      if (plain && fs::is_regular_file(layout_.dir + "/" + name, ec)) {
        extra_names.insert(name);
      } else {
        add({"integrity", "listed_file_absent", false, "", "", name, "absent",
             "named by " + source + " but not in the checkpoint directory (informational)"});
      }
    }
    if (options_.write_hashes) {
      for (const char* name : {kSafetensorsIndexName, "config.json"}) {
        if (fs::is_regular_file(layout_.dir + "/" + name, ec)) extra_names.insert(name);
      }
    }
    for (const auto& name : extra_names) {
      ShardReport other;
      other.name = name;
      other.file_size = fs::file_size(layout_.dir + "/" + name, ec);
      report_.other_files.push_back(other);
      names.push_back(name);
    }
    for (auto& sr : report_.shards) {
      if (hashable(sr)) reports.push_back(&sr);
    }
    for (auto& other : report_.other_files) reports.push_back(&other);

    std::vector<std::string> paths;
    uint64_t total = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      paths.push_back(layout_.dir + "/" + names[i]);
      total += reports[i]->file_size;
    }
    const int threads = options_.threads > 0
                            ? options_.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    // Value scanners for the shards with a parsed header (fed by the hashing threads, one per file).
    std::vector<std::unique_ptr<ShardValueScanner>> scanners(names.size());
    if (options_.check_values) {
      for (size_t i = 0; i < names.size(); ++i) {
        const auto it = std::find(layout_.shards.begin(), layout_.shards.end(), names[i]);
        if (it == layout_.shards.end()) continue;
        const OpenedShard& opened = opened_[static_cast<size_t>(it - layout_.shards.begin())];
        if (opened.header) scanners[i] = std::make_unique<ShardValueScanner>(*opened.header);
      }
    }
    ByteProgress progress("sha256", total, options_.progress_out, options_.progress_tty);
    auto results = sha256_files(
        paths, threads, [&](uint64_t n) { progress.add(n); },
        [&](size_t i, const Result<std::string>& r) {
          if (!options_.progress_tty) {
            progress.note(fmt::format("sha256 {} ({}) {}", names[i],
                                      human_bytes(static_cast<double>(reports[i]->file_size)),
                                      r.is_ok() ? "hashed" : "unreadable"));
          }
        },
        [&](size_t i, uint64_t offset, std::span<const uint8_t> bytes) {
          if (scanners[i]) scanners[i]->consume(offset, bytes);
        });
    progress.finish();
    report_.bytes_hashed = progress.done();

    std::map<std::string, std::string> digests;
    for (size_t i = 0; i < names.size(); ++i) {
      ShardReport& sr = *reports[i];
      const bool is_shard = i < names.size() - extra_names.size();
      if (!results[i].is_ok()) {
        sr.hash_status = "unreadable";
        add({"integrity", "unreadable_file", true, names[i], "", "readable", "read error",
             results[i].status().message()});
        continue;
      }
      sr.sha256 = *results[i];
      digests[names[i]] = sr.sha256;
      const auto it = expected.find(names[i]);
      if (it == expected.end()) {
        sr.hash_status = "no expected hash";
        if (is_shard && !source.empty()) {
          add({"integrity", "no_expected_hash", false, names[i], "", "a hash in " + source, "none",
               "this shard is not in the hash list (informational)"});
        }
        continue;
      }
      sr.expected_sha256 = it->second.sha256;
      if (it->second.size && *it->second.size != sr.file_size) {
        add({"integrity", "size_mismatch", true, names[i], "", fmt::format("{} bytes", *it->second.size),
             fmt::format("{} bytes", sr.file_size), "file size differs from " + it->second.source});
      }
      if (sr.sha256 == sr.expected_sha256) {
        sr.hash_status = "ok";
      } else {
        sr.hash_status = "mismatch";
        add({"integrity", "hash_mismatch", true, names[i], "", sr.expected_sha256, sr.sha256,
             "SHA-256 differs from " + it->second.source});
      }
    }
    if (!source.empty()) {
      // A hash list that names none of the shards compared nothing: that is not a pass.
      size_t compared = 0;
      for (const auto& sr : report_.shards) compared += !sr.expected_sha256.empty();
      if (compared == 0 && !report_.shards.empty()) {
        add({"integrity", "no_hash_compared", true, "", "", "a hash for at least one shard in " + source,
             expected.size() == 0 ? "an empty hash list"
                                  : fmt::format("{} hashes, none for a shard", expected.size()),
             "nothing was compared: the hash list is empty or names other files"});
      }
    }
    if (options_.check_values) add_value_findings(names, scanners);
    if (options_.write_hashes) {
      const std::string out = layout_.dir + "/" + kSha256SumsName;
      D0_RETURN_IF_ERROR(write_sha256sums(out, digests));
      report_.hashes_written = out;
    }
    return Status::ok();
  }

  void add_value_findings(const std::vector<std::string>& names,
                          const std::vector<std::unique_ptr<ShardValueScanner>>& scanners) {
    report_.n_values_checked = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!scanners[i]) continue;
      for (const TensorValueStats& s : scanners[i]->stats()) {
        ++report_.n_values_checked;
        if (s.n_nan > 0 || s.n_inf > 0) {
          add({"values", "non_finite_values", true, names[i], s.name, "finite values",
               fmt::format("{} NaN, {} Inf of {} {} values", s.n_nan, s.n_inf, s.n_values,
                           dtype_name(s.dtype)),
               fmt::format("first at element {}: the tensor is corrupt", s.first_bad)});
        } else if (s.max_abs > kAbsurdWeightMagnitude) {
          add({"values", "absurd_magnitude", true, names[i], s.name,
               fmt::format("|x| <= {:g}", kAbsurdWeightMagnitude), fmt::format("max |x| = {:g}", s.max_abs),
               "no trained weight is this large: a flipped exponent bit or garbage data"});
        }
      }
    }
  }

  const CheckpointLayout& layout_;
  const VerifyOptions& options_;
  VerifyReport report_;
  std::vector<OpenedShard> opened_;
  std::map<std::string, Located> where_;
};

}  // namespace

int VerifyReport::n_failed() const {
  return static_cast<int>(
      std::count_if(findings.begin(), findings.end(), [](const Finding& f) { return f.failed; }));
}

Result<VerifyReport> verify_checkpoint(const std::string& path, const VerifyOptions& options) {
  D0_ASSIGN_OR_RETURN(const CheckpointLayout layout, locate_checkpoint(path));
  Verifier verifier(layout, options);
  return verifier.run();
}

}  // namespace day0
