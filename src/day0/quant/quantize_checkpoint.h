#pragma once
// `day0 quantize`: an unquantized Hugging Face checkpoint -> a compressed-tensors pack-quantized one
// (quant/pack_quantized.h), weight-only, int4 or int8 per group.
//
// Which tensors: the projections of the family's weight table (storage kProjection: attention,
// dense MLP, routed and shared experts) of the decoder layers; embeddings, norms, biases, routers, the
// LM head (unless head_bits) and multi-token-prediction layers keep their original dtype, as do the modules
// `skip` names. The config's `ignore` list names every kept Linear module, so that transformers and vLLM pack
// exactly what was packed.
//
// Streaming: the source shards are memory-mapped and each output tensor is produced when the writer
// reaches it, one tensor in memory at a time. The output goes into a mkdtemp folder beside `out_dir`,
// renamed into place once complete; on failure or SIGINT/SIGTERM it is removed.
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"

namespace day0 {

struct QuantizeOptions {
  int bits = 4;                   // 4 or 8
  int64_t group_size = 128;       // 32, 64 or 128 columns per scale
  bool symmetric = true;          // false: per-group zero points
  std::vector<std::string> skip;  // module patterns kept unquantized: a glob ("*.down_proj") or "re:<regex>"
  std::FILE* progress = nullptr;  // progress lines (stderr), or nullptr for none
  // 8: an untied INT8 LM head (`--head int8`): lm_head.weight packed from the head, or from the embedding
  // when tied, in a second config group; the config says tie_word_embeddings false and the embedding
  // stays as stored for the lookup. Changes the logits, so never a default. 0: the head is kept.
  int head_bits = 0;
};

struct QuantizeResult {
  std::string dir;                  // the output folder
  ModelSpec spec;                   // the output's spec (weights.packed set)
  int64_t n_quantized = 0;          // projections packed
  int64_t n_kept = 0;               // tensors copied unchanged
  int64_t quantized_params = 0;     // parameters in packed projections (the head among them)
  int64_t head_params = 0;          // parameters of the packed LM head; 0 when kept
  uint64_t bytes_in = 0;            // tensor bytes read
  uint64_t bytes_out = 0;           // tensor bytes written
  std::vector<std::string> shards;  // file names written
  std::vector<std::string> ignore;  // the config's ignore list
};

// Bad input (catalog name, already quantized, a group size that does not divide a row, a non-finite
// weight, an existing non-empty `out_dir`) is an error naming the tensor or path.
Result<QuantizeResult> quantize_checkpoint(const std::string& model, const std::string& out_dir,
                                           const QuantizeOptions& options);

// A [rows, cols] weight quantized with `options` (scales rounded to `scale_dtype`) and dequantized
// to float32: what a reload of the quantized checkpoint must reproduce exactly.
Result<std::vector<float>> quantize_roundtrip(std::span<const float> weight, int64_t rows, int64_t cols,
                                              const QuantizeOptions& options, DType scale_dtype);

}  // namespace day0
