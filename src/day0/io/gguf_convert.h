#pragma once
// GGUF -> Hugging Face: the checkpoint a GGUF file was converted from, rebuilt as a folder that
// transformers and Day0 load (config.json, model.safetensors, tokenizer.json, tokenizer_config.json with
// the chat template, generation_config.json).
//
// What the conversion undoes: ggml's reversed dimension order (a GGUF tensor [ne0, ne1] is the HF
// tensor [ne1, ne0]), ggml's tensor names (blk.N.attn_q.weight -> model.layers.N.self_attn.q_proj.weight,
// one table per architecture), the quantisation (every tensor is dequantised to F32, then written as
// F32 or rounded to BF16), and llama.cpp's Q/K row permutation: within each head llama.cpp interleaves
// the two rotary halves (GGUF row 2j + i of a head is HF row i * head_dim / 2 + j, i in {0, 1}).
//
// The config is built from the <arch>.* metadata; any <arch>.* key that is not understood is refused
// (it may change the math), as are tensors with no Hugging Face counterpart in the table.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/dtype.h"
#include "day0/core/status.h"
#include "day0/io/gguf.h"

namespace day0::gguf {

// One output tensor: where it comes from and how to turn it into the HF one.
struct HfTensorPlan {
  std::string hf_name;
  const TensorInfo* source = nullptr;
  std::vector<int64_t> shape;   // the HF shape (row-major)
  int64_t unpermute_heads = 0;  // > 0: undo the rotary row interleave with this many heads
};

struct HfConversion {
  std::string architecture;  // the GGUF general.architecture
  nlohmann::ordered_json config;
  nlohmann::ordered_json tokenizer;         // tokenizer.json
  nlohmann::ordered_json tokenizer_config;  // with the chat template when the file has one
  nlohmann::ordered_json generation_config;
  std::vector<HfTensorPlan> tensors;
};

// Builds everything but the tensor bytes. Fails with a message naming the key or tensor on anything
// it does not understand.
Result<HfConversion> plan_hf_conversion(const GgufFile& file);

// The HF tensor as F32 (dequantised, rows un-permuted).
Result<std::vector<float>> hf_tensor_f32(const HfTensorPlan& plan);

// Reorders rows of a [n_heads * head_dim, cols] matrix (or a [n_heads * head_dim] vector, cols = 1)
// from llama.cpp's interleaved rotary layout back to the Hugging Face halves layout.
void unpermute_rotary_rows(std::span<const float> in, std::span<float> out, int64_t n_heads, int64_t head_dim,
                           int64_t cols);

struct ConvertOptions {
  DType dtype = DType::kBF16;     // kF32 or kBF16
  std::FILE* progress = nullptr;  // stderr for a progress bar; nullptr: silent
};

// Writes the folder `out_dir` atomically: everything goes into a sibling temporary folder that is
// renamed to `out_dir` at the end. `out_dir` must not exist or be an empty folder. Tensors are streamed
// one at a time (one tensor in F32 in memory at once).
Status convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir,
                          const ConvertOptions& options);

// True for a path naming an existing regular file that ends in ".gguf".
bool is_gguf_file(const std::string& path);
// The Hugging Face folder for a GGUF file, converted once (F32, exact) into a private cache folder:
// $DAY0_CACHE_DIR, else $XDG_CACHE_HOME/day0, else ~/.cache/day0, then gguf/<name>-<key>, keyed by the
// file's absolute path, size and modification time. Later calls reuse it.
Result<std::string> gguf_cached_hf_folder(const std::string& gguf_path, std::FILE* progress = stderr);

}  // namespace day0::gguf
