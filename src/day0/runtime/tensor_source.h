#pragma once
// Where the engine's weights come from: a name -> raw tensor lookup. The checkpoint adapter reads a
// Hugging Face folder (zero-copy over the mmap); the in-memory source holds tensors tests build or
// perturb. Views stay valid while the source lives.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/core/status.h"

namespace day0 {

struct TensorManifest;  // model/tensor_manifest.h
struct StoredLayout;    // model/stored_layout.h
struct IntWeight;       // runtime/int_weight.h

struct RawTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
  int64_t numel() const;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual bool contains(const std::string& name) const = 0;
  // NotFound naming the tensor when absent.
  virtual Result<RawTensor> get(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Where the tensors come from, for messages ("model dir", "memory").
  virtual std::string origin() const = 0;
  // False for a source of names, dtypes and shapes only (make_shape_only_source): its bytes are
  // unreadable and binding copies or converts nothing.
  virtual bool has_values() const { return true; }
  // The INT8 / INT4 projection `name` ("<m>.weight") kept quantized, when this source keeps integer
  // weights (PackedIntSource with keep_int) and its layout allows; null otherwise (then get() gives the
  // dequantized weight). Owned by the source.
  virtual Result<const IntWeight*> int_weight(const std::string& name) const {
    (void)name;
    return static_cast<const IntWeight*>(nullptr);
  }
};

// Every tensor of `manifest` (MTP layers left out) with its dtype and shape, whose bytes all lie in one
// inaccessible reserved mapping (PROT_NONE: reading one is a crash, not a silent zero). What the
// recorded operator list binds a model to when there are no weights (a config or catalog entry).
Result<std::shared_ptr<const TensorSource>> make_shape_only_source(const TensorManifest& manifest);

// What opening a checkpoint to run it does with the pages of its files that are cached already.
enum class PageCache {
  kKeep,    // use them as cached (a file written or read in small pieces sits in 4 KiB folios)
  kReload,  // drop them first, so that the runs read the files back in 2 MiB folios (one more read)
};
// Opens a checkpoint folder (model.safetensors or sharded with an index) for running: every shard's
// mapping asks for 2 MiB pages (MappedFile::advise_huge_pages), since decoding streams the weights once
// per token.
Result<std::unique_ptr<TensorSource>> open_checkpoint_source(const std::string& path,
                                                             PageCache page_cache = PageCache::kKeep);

// The tensors of `manifest` under the weight table's names, read from `inner`, a checkpoint that holds
// them under `layout` (model/stored_layout.h): renamed ones as they are, the parts of a fused tensor as
// views of its row blocks. Nothing is copied.
std::shared_ptr<const TensorSource> stored_layout_source(std::shared_ptr<const TensorSource> inner,
                                                         const TensorManifest& manifest,
                                                         const StoredLayout& layout);

// Tensors held in memory; copies of another source's tensors can be edited (weight perturbation).
class MemoryTensorSource : public TensorSource {
 public:
  void put(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  // Copies every tensor of `other`.
  static Result<std::unique_ptr<MemoryTensorSource>> copy_of(const TensorSource& other);
  // Mutable bytes of a stored tensor (NotFound when absent).
  Result<std::span<uint8_t>> mutable_bytes(const std::string& name);

  bool contains(const std::string& name) const override { return tensors_.count(name) != 0; }
  Result<RawTensor> get(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string origin() const override { return "memory"; }

 private:
  struct Stored {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Stored> tensors_;
};

}  // namespace day0
