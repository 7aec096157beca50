// A TensorSource that reads a checkpoint stored under another layout of the weight table's names
// (model/stored_layout.h) under the table's names: renamed tensors as they are, the parts of a fused
// tensor as views of its rows (zero-copy: a row block of a row-major tensor is contiguous).
#include <fmt/format.h>

#include <map>
#include <set>

#include "day0/core/checked_math.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {
namespace {

class StoredLayoutSource final : public TensorSource {
 public:
  StoredLayoutSource(std::shared_ptr<const TensorSource> inner, std::map<std::string, StoredLocation> where,
                     std::string layout)
      : inner_(std::move(inner)), where_(std::move(where)), layout_(std::move(layout)) {
    for (const auto& [name, loc] : where_) stored_names_.insert(loc.name);
  }

  bool contains(const std::string& name) const override {
    const auto it = where_.find(name);
    return inner_->contains(it == where_.end() ? name : it->second.name);
  }

  Result<RawTensor> get(const std::string& name) const override {
    const auto it = where_.find(name);
    if (it == where_.end()) return inner_->get(name);
    const StoredLocation& loc = it->second;
    D0_ASSIGN_OR_RETURN(RawTensor t, inner_->get(loc.name));
    t.name = name;
    if (!loc.view()) return t;
    // A stacked expert tensor [E, rows of one expert, columns] is E x those rows.
    if (loc.stacked_experts > 0 && t.shape.size() == 3 && t.shape[0] == loc.stacked_experts) {
      t.shape = {t.shape[0] * t.shape[1], t.shape[2]};
    }
    if (t.shape.empty() || t.shape[0] != loc.stored_rows) {
      return invalid_argument(fmt::format(
          "{}: tensor {} ({}): expected {} rows, the parts the weight table splits it into; found shape [{}]",
          inner_->origin(), loc.name, layout_, loc.stored_rows, fmt::join(t.shape, ", ")));
    }
    const uint64_t row_bytes = t.data.size() / static_cast<uint64_t>(loc.stored_rows);
    if (row_bytes * static_cast<uint64_t>(loc.stored_rows) != t.data.size()) {
      return invalid_argument(fmt::format("{}: tensor {}: its bytes do not split into {} rows",
                                          inner_->origin(), loc.name, loc.stored_rows));
    }
    t.shape[0] = loc.rows;
    // A shape-only source's bytes are never read: the view's span stays inside its reservation.
    t.data = t.data.subspan(static_cast<size_t>(row_bytes * static_cast<uint64_t>(loc.row_begin)),
                            static_cast<size_t>(row_bytes * static_cast<uint64_t>(loc.rows)));
    return t;
  }

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, loc] : where_) {
      if (inner_->contains(loc.name)) out.push_back(name);
    }
    for (const std::string& name : inner_->names()) {
      if (!stored_names_.count(name) && !where_.count(name)) out.push_back(name);
    }
    return out;
  }

  std::string origin() const override { return inner_->origin(); }
  bool has_values() const override { return inner_->has_values(); }

  Result<const IntWeight*> int_weight(const std::string& name) const override {
    const auto it = where_.find(name);
    if (it == where_.end()) return inner_->int_weight(name);
    // A row block of a packed tensor is not a packed tensor of its own: dequantized through get().
    if (it->second.view()) return static_cast<const IntWeight*>(nullptr);
    return inner_->int_weight(it->second.name);
  }

 private:
  std::shared_ptr<const TensorSource> inner_;
  std::map<std::string, StoredLocation> where_;  // the table's name -> where the checkpoint holds it
  std::set<std::string> stored_names_;
  std::string layout_;
};

}  // namespace

std::shared_ptr<const TensorSource> stored_layout_source(std::shared_ptr<const TensorSource> inner,
                                                         const TensorManifest& manifest,
                                                         const StoredLayout& layout) {
  std::map<std::string, StoredLocation> where = stored_locations(manifest, layout);
  // Only the tensors the layout moves need a lookup.
  std::erase_if(where,
                [](const auto& entry) { return !entry.second.view() && entry.second.name == entry.first; });
  return std::make_shared<StoredLayoutSource>(std::move(inner), std::move(where), layout.name);
}

}  // namespace day0
