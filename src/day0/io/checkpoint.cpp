#include "day0/io/checkpoint.h"

#include "day0/core/json_reader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace day0 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<ShardIndex> read_shard_index(const std::string& index_path) {
  D0_ASSIGN_OR_RETURN(json root, read_json_file(index_path, JsonLimits{size_t{256} << 20, 16}));
  if (!root.is_object()) return parse_error(index_path + ": expected a JSON object");
  const auto wm = root.find("weight_map");
  if (wm == root.end() || !wm->is_object())
    return parse_error(index_path + ": weight_map: missing or not an object");
  ShardIndex index;
  std::set<std::string> shards;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      return parse_error(index_path + ": weight_map." + name + ": expected a file name");
    const auto& file = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(file)) {
      return parse_error(index_path + ": weight_map." + name + ": '" + file + "' is not a plain file name");
    }
    index.weight_map[name] = file;
    shards.insert(file);
  }
  index.shards.assign(shards.begin(), shards.end());
  if (const auto md = root.find("metadata"); md != root.end() && md->is_object()) {
    for (const auto& [key, value] : md->items()) {
      if (key == "total_size") {
        if (value.is_number_unsigned()) {
          index.total_size = value.get<uint64_t>();
        } else if (value.is_number_float() && value.get<double>() >= 0 && value.get<double>() < 0x1p63) {
          index.total_size = static_cast<uint64_t>(value.get<double>());  // some writers emit 1.2e10
        } else {
          return parse_error(index_path + ": metadata.total_size: expected a non-negative integer");
        }
      } else if (value.is_string()) {
        index.metadata[key] = value.get<std::string>();
      }
    }
  }
  return index;
}

Result<CheckpointLayout> locate_checkpoint(const std::string& path) {
  std::error_code ec;
  CheckpointLayout layout;
  if (fs::is_directory(path, ec)) {
    layout.dir = path;
    const std::string index_path = path + "/" + kSafetensorsIndexName;
    if (fs::exists(index_path, ec)) {
      D0_ASSIGN_OR_RETURN(auto index, read_shard_index(index_path));
      layout.shards = index.shards;
      layout.index = std::move(index);
      return layout;
    }
    if (fs::exists(path + "/" + kSingleSafetensorsName, ec)) {
      layout.shards = {kSingleSafetensorsName};
      return layout;
    }
    return not_found(path + ": no " + kSafetensorsIndexName + " and no " + kSingleSafetensorsName);
  }
  if (!fs::exists(path, ec)) return not_found(path + ": no such file or directory");
  const fs::path p(path);
  layout.dir = p.has_parent_path() ? p.parent_path().string() : ".";
  if (ends_with(path, ".index.json")) {
    D0_ASSIGN_OR_RETURN(auto index, read_shard_index(path));
    layout.shards = index.shards;
    layout.index = std::move(index);
    return layout;
  }
  if (ends_with(path, ".safetensors")) {
    layout.shards = {p.filename().string()};
    return layout;
  }
  return invalid_argument(path + ": expected a directory, an .index.json or a .safetensors file");
}

Result<Checkpoint> Checkpoint::open(const std::string& path) {
  Checkpoint ckpt;
  D0_ASSIGN_OR_RETURN(ckpt.layout_, locate_checkpoint(path));
  ckpt.shards_ = std::make_unique<std::vector<SafetensorsFile>>();
  ckpt.shards_->reserve(ckpt.layout_.shards.size());
  std::map<std::string, size_t> shard_position;
  for (const auto& shard : ckpt.layout_.shards) {
    D0_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(ckpt.layout_.shard_path(shard)));
    shard_position[shard] = ckpt.shards_->size();
    ckpt.shards_->push_back(std::move(file));
  }
  for (size_t i = 0; i < ckpt.shards_->size(); ++i) {
    for (const auto& entry : (*ckpt.shards_)[i].header().tensors) {
      if (!ckpt.where_.emplace(entry.name, i).second) {
        return parse_error("tensor '" + entry.name + "' is stored in both " +
                           ckpt.layout_.shards[ckpt.where_[entry.name]] + " and " + ckpt.layout_.shards[i]);
      }
    }
  }
  if (ckpt.layout_.index) {
    for (const auto& [name, shard] : ckpt.layout_.index->weight_map) {
      const auto it = ckpt.where_.find(name);
      if (it == ckpt.where_.end() || it->second != shard_position[shard]) {
        return not_found(ckpt.layout_.shard_path(shard) + ": index maps tensor '" + name +
                         "' to this shard but its header does not hold it");
      }
    }
  }
  return ckpt;
}

Result<TensorView> Checkpoint::tensor(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return not_found(layout_.dir + ": checkpoint holds no tensor '" + name + "'");
  return (*shards_)[it->second].tensor(name);
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, unused] : where_) names.push_back(name);
  return names;
}

uint64_t Checkpoint::total_file_bytes() const {
  uint64_t total = 0;
  for (const auto& shard : *shards_) total += shard.file_size();
  return total;
}

void Checkpoint::advise_huge_pages() const {
  for (const auto& shard : *shards_) shard.mapping().advise_huge_pages();
}

Status Checkpoint::drop_cached_pages() const {
  for (const auto& shard : *shards_) D0_RETURN_IF_ERROR(shard.mapping().drop_cached_pages());
  return Status::ok();
}

}  // namespace day0
