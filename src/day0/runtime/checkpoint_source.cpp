// TensorSource over a Hugging Face checkpoint folder (io/checkpoint.h): zero-copy views into the mmap.
#include <fmt/format.h>

#include "day0/io/checkpoint.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {
namespace {

class CheckpointSource : public TensorSource {
 public:
  CheckpointSource(Checkpoint checkpoint, std::string path)
      : ckpt_(std::move(checkpoint)), path_(std::move(path)) {}
  bool contains(const std::string& name) const override { return ckpt_.contains(name); }
  Result<RawTensor> get(const std::string& name) const override {
    auto t = ckpt_.tensor(name);
    if (!t.is_ok()) return Status(t.status().code(), fmt::format("{}: {}", path_, t.status().message()));
    return RawTensor{name, t->dtype, std::vector<int64_t>(t->shape.begin(), t->shape.end()), t->data};
  }
  std::vector<std::string> names() const override { return ckpt_.tensor_names(); }
  std::string origin() const override { return path_; }

 private:
  Checkpoint ckpt_;
  std::string path_;
};

}  // namespace

Result<std::unique_ptr<TensorSource>> open_checkpoint_source(const std::string& path, PageCache page_cache) {
  D0_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(path));
  // Advice first: a page dropped below is read back under it.
  ckpt.advise_huge_pages();
  if (page_cache == PageCache::kReload) D0_RETURN_IF_ERROR(ckpt.drop_cached_pages());
  return std::unique_ptr<TensorSource>(std::make_unique<CheckpointSource>(std::move(ckpt), path));
}

}  // namespace day0
