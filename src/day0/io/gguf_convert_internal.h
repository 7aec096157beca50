#pragma once
// Pieces of the GGUF -> Hugging Face conversion shared between its files.
#include "day0/io/gguf_convert.h"

namespace day0::gguf {

// Fills out.tokenizer, out.tokenizer_config and out.generation_config from tokenizer.ggml.*.
Status build_hf_tokenizer(const GgufFile& file, HfConversion& out);

}  // namespace day0::gguf
