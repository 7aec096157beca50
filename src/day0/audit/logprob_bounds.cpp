#include "day0/audit/logprob_bounds.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "day0/io/gguf.h"
#include "day0/model/catalog.h"

namespace day0::audit {

namespace {

bool is_gguf(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

// The GGUF's tensor type holding most of the matrices' elements (Q4_1 for a "Q4_1" file whose
// embeddings are Q6_K), as llama.cpp names the file's type.
Result<std::string> gguf_dominant_type(const std::string& path) {
  D0_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
  std::map<std::string, uint64_t> elements;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.dims.size() < 2) continue;  // norms and biases stay float in every quantized GGUF
    const auto info = gguf::ggml_type_info(t.type);
    elements[info ? info->name : fmt::format("type {}", t.type)] += t.n_elements;
  }
  if (elements.empty()) return invalid_argument(path + ": no matrices");
  return std::max_element(elements.begin(), elements.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

// MODEL's own weight format: the GGUF's tensor type, a config's quantization, else its dtype.
Result<TargetFormat> detect_format(const std::string& model) {
  if (is_gguf(model)) {
    D0_ASSIGN_OR_RETURN(std::string type, gguf_dominant_type(model));
    const bool float_type = type == "F32" || type == "F16" || type == "BF16";
    return TargetFormat{float_type ? (type == "F32"   ? "f32"
                                      : type == "F16" ? "f16"
                                                      : "bf16")
                                   : "gguf " + type,
                        "the GGUF's tensor types (" + type + ")", !float_type};
  }
  D0_ASSIGN_OR_RETURN(ResolvedModel resolved, resolve_model(model));
  const ModelSpec& spec = resolved.spec;
  if (spec.weights.packed.bits != 0)
    return TargetFormat{fmt::format("int{}", spec.weights.packed.bits), "config.json quantization_config",
                        true};
  switch (spec.weights.format) {
    case WeightFormat::kFp8Block:
      return TargetFormat{"fp8", "config.json quantization_config", true};
    case WeightFormat::kMxfp4:
      return TargetFormat{"mxfp4", "config.json quantization_config", true};
    case WeightFormat::kInt8:
      return TargetFormat{"int8", "config.json quantization_config", true};
    case WeightFormat::kInt4:
      return TargetFormat{"int4", "config.json quantization_config", true};
    case WeightFormat::kF32:
      return TargetFormat{"f32", "config.json torch_dtype", false};
    case WeightFormat::kF16:
      return TargetFormat{"f16", "config.json torch_dtype", false};
    case WeightFormat::kBF16:
      break;
  }
  return TargetFormat{"bf16", "config.json torch_dtype", false};
}

}  // namespace

const std::vector<std::string>& target_format_names() {
  static const std::vector<std::string> names = {"auto", "f32",   "bf16", "f16",
                                                 "fp8",  "mxfp4", "int8", "int4"};
  return names;
}

Result<TargetFormat> resolve_target_format(const std::string& model, const std::string& flag) {
  if (!flag.empty() && flag != "auto" &&
      std::find(target_format_names().begin(), target_format_names().end(), flag) ==
          target_format_names().end())
    return invalid_argument(
        fmt::format("--target-format {}: expected one of {}", flag, fmt::join(target_format_names(), ", ")));
  D0_ASSIGN_OR_RETURN(TargetFormat own, detect_format(model));
  if (flag.empty() || flag == "auto") return own;
  const bool quantized = flag != "f32" && flag != "bf16" && flag != "f16";
  if (own.quantized && flag != own.name)
    return invalid_argument(
        fmt::format("--target-format {}: MODEL holds {} weights ({}); the target serves them "
                    "as they are — leave --target-format out or name {}",
                    flag, own.name, own.source, own.name));
  return TargetFormat{flag, "--target-format", quantized};
}

Result<OwnRunPlan> plan_own_run(const std::string& model, const TargetFormat& format,
                                const std::string& quantized_reference) {
  OwnRunPlan plan;
  if (format.name == "f32") {
    if (!quantized_reference.empty())
      return invalid_argument("--quantized-reference " + quantized_reference + ": the target format is f32");
    plan.is_reference = true;
    plan.description = "Day0's f32 run is the reference: its own figures are 0, the bounds their floors";
    return plan;
  }
  D0_ASSIGN_OR_RETURN(TargetFormat model_format, detect_format(model));
  if (model_format.quantized || !format.quantized) {
    if (!quantized_reference.empty())
      return invalid_argument(
          fmt::format("--quantized-reference {}: MODEL's own {} weights are what the target "
                      "serves; a quantized copy is for a float MODEL served quantized",
                      quantized_reference, model_format.name));
    plan.weights = model;
    plan.description =
        fmt::format("Day0 on MODEL's {} weights with BF16 activations and KV cache{}", model_format.name,
                    model_format.quantized ? " (its BF16 path: integer kernels where it has them)" : "");
    return plan;
  }
  // A float MODEL that the target quantizes: Day0's own quantized copy of it.
  if (quantized_reference.empty())
    return invalid_argument(fmt::format(
        "--target-format {}: MODEL holds {} weights, so the {} bounds need Day0's own quantized copy "
        "of it: pass --quantized-reference DIR (from `day0 quantize` for int4 / int8)",
        format.name, model_format.name, format.name));
  D0_ASSIGN_OR_RETURN(TargetFormat copy_format, detect_format(quantized_reference));
  if (copy_format.name != format.name)
    return invalid_argument(
        fmt::format("--quantized-reference {}: holds {} weights ({}), the target format is {}",
                    quantized_reference, copy_format.name, copy_format.source, format.name));
  plan.weights = quantized_reference;
  plan.description = fmt::format(
      "Day0 on the {} copy {} with BF16 activations and KV cache (integer kernels "
      "where it has them)",
      format.name, quantized_reference);
  return plan;
}

Result<OwnRun> open_own_run(const OwnRunPlan& plan) {
  OwnRun run;
  D0_ASSIGN_OR_RETURN(run.model, load_model(plan.weights, load_options_for(ActivationPrecision::kBF16)));
  EngineOptions eo;
  eo.precision = ActivationPrecision::kBF16;
  eo.kv_dtype = KvDtype::kBF16;
  D0_ASSIGN_OR_RETURN(run.engine, open_engine(run.model, "cpu", eo));
  return run;
}

}  // namespace day0::audit
