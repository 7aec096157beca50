#pragma once
// A Hugging Face checkpoint: one model.safetensors, or shards named by model.safetensors.index.json
// (docs/models.md, "Safetensors files"). Tensor lookup by name across shards, zero-copy.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/io/safetensors_file.h"

namespace day0 {

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr const char* kSingleSafetensorsName = "model.safetensors";

struct ShardIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::vector<std::string> shards;                // distinct shard names, sorted
  std::optional<uint64_t> total_size;             // metadata.total_size when given
  std::map<std::string, std::string> metadata;    // other string metadata
};

// Parses an index file; shard names must be plain file names (no '/' or "..": they resolve beside it).
Result<ShardIndex> read_shard_index(const std::string& index_path);

// Where a checkpoint's files are: the directory, the index (if sharded) and the shard file names.
struct CheckpointLayout {
  std::string dir;
  std::optional<ShardIndex> index;  // absent for a single file
  std::vector<std::string> shards;  // file names relative to dir
  std::string shard_path(const std::string& shard) const { return dir + "/" + shard; }
};

// `path` is a directory (index preferred, else model.safetensors), an index file or a .safetensors
// file. Does not open the shards.
Result<CheckpointLayout> locate_checkpoint(const std::string& path);

class Checkpoint {
 public:
  // Opens every shard and checks the index against the shard headers (each mapped tensor present in
  // its shard). Fails on the first problem; `day0 verify` reports all problems instead.
  static Result<Checkpoint> open(const std::string& path);

  const CheckpointLayout& layout() const { return layout_; }
  const std::vector<SafetensorsFile>& shards() const { return *shards_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  Result<TensorView> tensor(const std::string& name) const;
  std::vector<std::string> tensor_names() const;  // sorted
  uint64_t total_file_bytes() const;
  // MappedFile::advise_huge_pages / drop_cached_pages over every shard.
  void advise_huge_pages() const;
  Status drop_cached_pages() const;

 private:
  CheckpointLayout layout_;
  std::unique_ptr<std::vector<SafetensorsFile>> shards_;  // stable addresses for views
  std::map<std::string, size_t> where_;                   // tensor -> shard position
};

}  // namespace day0
