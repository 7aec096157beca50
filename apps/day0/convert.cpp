// day0 convert MODEL.gguf --out DIR: a GGUF file back to the Hugging Face folder it came from.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "command.h"
#include "day0/io/gguf_convert.h"

namespace day0::cli {
namespace {

struct ConvertArgs {
  std::string model;
  std::string out;
  std::string dtype = "bf16";
  bool quiet = false;
};

int convert_command(const ConvertArgs& a) {
  const char* name = "convert";
  if (!gguf::is_gguf_file(a.model)) {
    return report_error(name, invalid_argument(fmt::format("{}: not a .gguf file", a.model)));
  }
  gguf::ConvertOptions options;
  options.dtype = a.dtype == "f32" ? DType::kF32 : DType::kBF16;
  options.progress = a.quiet ? nullptr : stderr;
  Status st = gguf::convert_gguf_to_hf(a.model, a.out, options);
  if (!st.is_ok()) return report_error(name, st);
  fmt::print(
      "wrote {} ({}): config.json, model.safetensors, tokenizer.json, tokenizer_config.json, "
      "generation_config.json\n",
      a.out, a.dtype);
  return kExitOk;
}

const Registrar kConvertCommand(
    "convert",
    "Convert a GGUF file to a Hugging Face folder (config.json, safetensors, tokenizer.json, chat template)",
    15, [](CLI::App& app) -> CommandRunner {
      auto a = std::make_shared<ConvertArgs>();
      app.add_option("MODEL", a->model, "The .gguf file")->required();
      app.add_option("--out", a->out,
                     "Folder to write (must not exist, or be empty); written beside it first and renamed "
                     "into place when complete")
          ->required();
      app.add_option("--dtype", a->dtype, "Tensor type of the safetensors: bf16 (default) or f32 (exact)")
          ->check(CLI::IsMember({"bf16", "f32"}));
      app.add_flag("--quiet", a->quiet, "No progress bar");
      app.footer(
          "Quantised tensors are dequantised (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, "
          "Q6_K), "
          "llama.cpp's Q/K row permutation is undone, and the tokenizer is rebuilt from tokenizer.ggml.*. "
          "Other commands (inspect, run, align, perplexity) accept a .gguf path directly: they convert it "
          "once "
          "(F32) into a private cache folder ($DAY0_CACHE_DIR, else $XDG_CACHE_HOME/day0, else "
          "~/.cache/day0) "
          "and reuse it.");
      return [a] { return convert_command(*a); };
    });

}  // namespace
}  // namespace day0::cli
