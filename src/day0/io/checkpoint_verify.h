#pragma once
// Verification of a downloaded checkpoint (the engine of `day0 verify`): every problem is collected
// as a Finding instead of stopping at the first one.
//  - structure: shards named by the index but absent, truncated or unreadable shards (bad headers,
//    Git LFS pointers in place of data), index entries that disagree with the shard headers, and
//    (with a manifest) every expected tensor present with its shape and dtype, extra tensors reported;
//  - integrity: streamed SHA-256 of every shard in parallel, compared with SHA256SUMS beside the
//    shards or the list given (see hash_manifest.h), and LFS pointer sizes;
//  - values (optional): NaN, Inf and absurd magnitudes per tensor, scanned from the bytes the hashing
//    pass reads (see value_scan.h).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/tensor_manifest.h"

namespace day0 {

struct VerifyOptions {
  const TensorManifest* manifest = nullptr;  // structure against a model's tensor list (optional)
  bool allow_extra = false;                  // tensors outside the manifest are reported, not failed
  bool check_hashes = true;
  std::string hashes_path;            // empty: <dir>/SHA256SUMS when present
  bool write_hashes = false;          // write <dir>/SHA256SUMS from the computed digests
  bool check_values = false;          // NaN / Inf / absurd magnitudes per tensor, with the hash read
  int threads = 0;                    // 0: hardware concurrency
  std::FILE* progress_out = nullptr;  // progress while hashing (nullptr: silent)
  bool progress_tty = false;
};

struct Finding {
  std::string check;   // "structure" or "integrity"
  std::string kind;    // e.g. "missing_shard", "shape_mismatch", "hash_mismatch", "extra_tensor"
  bool failed = true;  // false: reported for information (allowed extras, no expected hash)
  std::string shard;
  std::string tensor;
  std::string expected;
  std::string found;
  std::string message;
  int64_t layer = -1;  // decoder layer of the tensor when its name has one (groups extras in reports)
};

struct ShardReport {
  std::string name;
  std::string status = "ok";  // ok, missing, truncated, invalid, lfs_pointer
  uint64_t file_size = 0;
  int64_t n_tensors = 0;
  uint64_t tensor_bytes = 0;
  std::string sha256;                       // computed (empty when not hashed)
  std::string expected_sha256;              // empty when unknown
  std::string hash_status = "not checked";  // ok, mismatch, no expected hash, not checked, unreadable
};

struct VerifyReport {
  std::string dir;
  bool sharded = false;
  std::vector<ShardReport> shards;
  std::vector<ShardReport> other_files;  // non-shard files a hash list names (config.json, ...)
  std::vector<Finding> findings;
  int64_t n_tensors = 0;            // tensors found in shard headers
  int64_t n_manifest_tensors = -1;  // -1: no manifest given
  int64_t n_mtp_tensors = 0;        // of those, multi-token-prediction tensors (not read by decoding)
  uint64_t bytes_hashed = 0;
  int64_t n_values_checked = -1;  // tensors whose values were scanned (-1: no value scan)
  std::string hash_source;        // where expected hashes came from ("" none)
  std::string hashes_written;
  int n_failed() const;
  bool ok() const { return n_failed() == 0; }
};

// Errors (exit 2) only for unusable input: path absent, not a checkpoint, unreadable index or hash list.
Result<VerifyReport> verify_checkpoint(const std::string& path, const VerifyOptions& options);

nlohmann::json verify_report_json(const VerifyReport& report);
// Aligned tables: shards, then findings (extras summarised beyond `max_listed` lines), then a summary.
std::string format_verify_report(const VerifyReport& report, size_t max_listed = 40);

}  // namespace day0
