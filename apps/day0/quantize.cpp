// day0 quantize MODEL --to int8|int4 --out DIR: weight-only integer quantization into the
// compressed-tensors pack-quantized layout (quant/quantize_checkpoint.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "day0/core/human.h"
#include "day0/model/packed_int_config.h"
#include "day0/quant/quantize_checkpoint.h"

namespace day0::cli {
namespace {

struct QuantizeArgs {
  std::string model;
  std::string to;
  int64_t group = 128;
  bool symmetric = false;
  bool asymmetric = false;
  std::vector<std::string> skip;
  std::string head = "keep";
  std::string out;
  bool json = false;
  bool quiet = false;
};

int run_quantize(const QuantizeArgs& args) {
  QuantizeOptions options;
  options.bits = args.to == "int8" ? 8 : 4;
  options.group_size = args.group;
  options.symmetric = !args.asymmetric;
  options.skip = args.skip;
  options.head_bits = args.head == "int8" ? 8 : 0;
  options.progress = args.quiet ? nullptr : stderr;
  auto result = quantize_checkpoint(args.model, args.out, options);
  if (!result.is_ok()) return report_error("quantize", result.status());
  const QuantizeResult& r = *result;
  const double ratio =
      r.bytes_out > 0 ? static_cast<double>(r.bytes_in) / static_cast<double>(r.bytes_out) : 0.0;
  if (args.json) {
    nlohmann::json out = {{"model", args.model},
                          {"dir", r.dir},
                          {"scheme", packed_int_label(r.spec.weights.packed)},
                          {"bits", options.bits},
                          {"group_size", options.group_size},
                          {"symmetric", options.symmetric},
                          {"head", args.head},
                          {"head_params", r.head_params},
                          {"tie_word_embeddings", r.spec.tie_word_embeddings},
                          {"quantized_tensors", r.n_quantized},
                          {"kept_tensors", r.n_kept},
                          {"quantized_params", r.quantized_params},
                          {"bytes_in", r.bytes_in},
                          {"bytes_out", r.bytes_out},
                          {"compression", ratio},
                          {"shards", r.shards},
                          {"ignore", r.ignore}};
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("Quantized {} -> {} ({}, compressed-tensors pack-quantized)\n", args.model, r.dir,
             packed_int_label(r.spec.weights.packed));
  fmt::print("  packed   {} projections, {} parameters\n", r.n_quantized, with_commas(r.quantized_params));
  if (r.head_params > 0) {
    fmt::print(
        "  head     lm_head int8 g{}, {} parameters (untied: tie_word_embeddings "
        "false; the logits change)\n",
        options.group_size, with_commas(r.head_params));
  }
  fmt::print("  kept     {} tensors in their original dtype ({} modules in the ignore list)\n", r.n_kept,
             r.ignore.size());
  fmt::print("  size     {} -> {} ({:.2f}x smaller)\n", human_bytes(static_cast<double>(r.bytes_in)),
             human_bytes(static_cast<double>(r.bytes_out)), ratio);
  return kExitOk;
}

const Registrar kQuantizeCommand(
    "quantize",
    "Quantize MODEL's projections to int8 or int4 (weight-only, per-group scales) into a compressed-tensors "
    "pack-quantized checkpoint that transformers and vLLM load",
    35, [](CLI::App& app) -> CommandRunner {
      auto args = std::make_shared<QuantizeArgs>();
      app.add_option("MODEL", args->model, "Checkpoint folder (config.json + safetensors), unquantized")
          ->required();
      app.add_option("--to", args->to, "Integer width: int8 or int4")
          ->required()
          ->check(CLI::IsMember({"int8", "int4"}));
      app.add_option("--group", args->group, "Columns per scale: 32, 64 or 128 (default 128)")
          ->check(CLI::IsMember({32, 64, 128}));
      auto* sym = app.add_flag("--symmetric", args->symmetric, "Scales only, zero point 0 (the default)");
      auto* asym = app.add_flag("--asymmetric", args->asymmetric, "Per-group zero points as well as scales");
      sym->excludes(asym);
      app.add_option("--skip", args->skip,
                     "Modules kept in the original precision besides embeddings, norms, routers and the LM "
                     "head: a glob over module names (\"*.down_proj\") or re:<regex>; repeatable");
      app.add_option("--head", args->head,
                     "LM head: keep (the default; as stored, or the tied embedding) or int8 (an untied "
                     "lm_head packed INT8 with --group beside the kept embedding; halves the bytes the head "
                     "reads per token but changes the logits, so it is never a default)")
          ->check(CLI::IsMember({"keep", "int8"}));
      app.add_option("--out", args->out, "Directory to create (must not exist, or be empty)")->required();
      app.add_flag("--json", args->json, "Print the result as JSON");
      app.add_flag("--quiet", args->quiet, "No progress on stderr");
      return [args] { return run_quantize(*args); };
    });

}  // namespace
}  // namespace day0::cli
