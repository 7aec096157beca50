#include "day0/model/nvfp4_config.h"

#include <fmt/format.h>

#include "day0/model/packed_int_config.h"

namespace day0 {
namespace {

constexpr int64_t kNvfp4Group = 16;

Status nvfp4_unsupported(const ConfigReader& r, std::string_view key, std::string_view expected,
                         const std::string& found) {
  return unsupported(
      fmt::format("{}: {}: expected {}, found {} (Day0 loads NVFP4 weights: E2M1, FP8 E4M3 "
                  "scales per 16 columns, one float32 global scale)",
                  r.source(), r.key_path(key), expected, found));
}

Status check_patterns(const ConfigReader& r, std::string_view key, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (Status s = validate_module_pattern(p); !s.is_ok()) {
      return r.invalid(key, fmt::format("\"{}\" is not a valid pattern: {}", p, s.message()));
    }
  }
  return Status::ok();
}

// One compressed-tensors quantization-args object of the nvfp4 preset (weights or input activations).
Status check_nvfp4_args(const ConfigReader& args, bool activations) {
  D0_ASSIGN_OR_RETURN(int64_t bits, args.required_int("num_bits", 1, 64));
  if (bits != 4) return nvfp4_unsupported(args, "num_bits", "4", std::to_string(bits));
  D0_ASSIGN_OR_RETURN(std::string type, args.required_string("type"));
  if (type != "float") return nvfp4_unsupported(args, "type", "\"float\"", "\"" + type + "\"");
  D0_ASSIGN_OR_RETURN(std::string strategy, args.optional_string("strategy", "tensor_group"));
  if (strategy != "tensor_group") {
    return nvfp4_unsupported(args, "strategy", "\"tensor_group\"", "\"" + strategy + "\"");
  }
  D0_ASSIGN_OR_RETURN(int64_t group, args.required_int("group_size", 1, 1 << 20));
  if (group != kNvfp4Group) return nvfp4_unsupported(args, "group_size", "16", std::to_string(group));
  D0_ASSIGN_OR_RETURN(bool symmetric, args.optional_bool("symmetric", true));
  if (!symmetric) return nvfp4_unsupported(args, "symmetric", "true", "false");
  // Weights are static; activations' local scales are computed per token ("local"), which leaves only the
  // stored global scale in the checkpoint.
  if (activations) {
    args.mark_used("dynamic");
  } else {
    D0_ASSIGN_OR_RETURN(bool dynamic, args.optional_bool("dynamic", false));
    if (dynamic) return nvfp4_unsupported(args, "dynamic", "false", "true");
  }
  if (args.present("actorder"))
    return nvfp4_unsupported(args, "actorder", "null", args.json().at("actorder").dump());
  if (args.present("block_structure")) {
    return nvfp4_unsupported(args, "block_structure", "null", args.json().at("block_structure").dump());
  }
  for (const char* k : {"observer", "observer_kwargs", "scale_dtype", "zp_dtype"}) args.mark_used(k);
  return Status::ok();
}

}  // namespace

std::string glob_to_module_pattern(const std::string& glob) {
  std::string re = "re:";
  for (char c : glob) {
    if (c == '*') {
      re += ".*";
    } else if (c == '?') {
      re += '.';
    } else if (std::string_view("\\.^$|()[]{}+").find(c) != std::string_view::npos) {
      re += '\\';
      re += c;
    } else {
      re += c;
    }
  }
  return re + "(\\..*)?$";  // a module or anything inside it (excluding "mlp" excludes "mlp.down_proj")
}

Status parse_modelopt_quantization(const ConfigReader& quant, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::string algo, quant.required_string("quant_algo"));
  if (algo != "NVFP4") return nvfp4_unsupported(quant, "quant_algo", "\"NVFP4\"", "\"" + algo + "\"");
  D0_ASSIGN_OR_RETURN(int64_t group, quant.optional_int("group_size", kNvfp4Group, 1, 1 << 20));
  if (group != kNvfp4Group) return nvfp4_unsupported(quant, "group_size", "16", std::to_string(group));
  if (quant.present("kv_cache_quant_algo")) {
    return nvfp4_unsupported(quant, "kv_cache_quant_algo", "null (Day0 keeps the KV cache unquantized)",
                             quant.json().at("kv_cache_quant_algo").dump());
  }
  quant.mark_used("producer");
  D0_ASSIGN_OR_RETURN(std::vector<std::string> exclude, quant.optional_string_list("exclude_modules"));
  Nvfp4Spec n;
  n.layout = Nvfp4Layout::kModelOpt;
  n.targets = {"Linear"};
  n.ignore = std::move(exclude);  // globs, as the file has them (nvfp4_module reads them as globs)
  for (const auto& e : n.ignore) {
    if (Status s = validate_module_pattern(glob_to_module_pattern(e)); !s.is_ok()) {
      return quant.invalid("exclude_modules",
                           fmt::format("\"{}\" is not a valid pattern: {}", e, s.message()));
    }
  }
  // ModelOpt's NVFP4 recipe calibrates activations too: every quantized Linear carries input_scale.
  n.activation_scales = true;
  spec.weights.nvfp4 = std::move(n);
  return Status::ok();
}

Status parse_compressed_tensors_nvfp4(const ConfigReader& quant, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::string status, quant.optional_string("quantization_status", "compressed"));
  if (status != "compressed") {
    return nvfp4_unsupported(quant, "quantization_status", "\"compressed\"", "\"" + status + "\"");
  }
  if (quant.present("kv_cache_scheme")) {
    return nvfp4_unsupported(quant, "kv_cache_scheme", "null (Day0 keeps the KV cache unquantized)",
                             quant.json().at("kv_cache_scheme").dump());
  }
  if (quant.present("transform_config")) {
    return nvfp4_unsupported(quant, "transform_config", "null", "weight transforms");
  }
  if (quant.present("sparsity_config") && !quant.json().at("sparsity_config").empty()) {
    return nvfp4_unsupported(quant, "sparsity_config", "{}", quant.json().at("sparsity_config").dump());
  }
  for (const char* k : {"version", "global_compression_ratio", "sparsity_config"}) quant.mark_used(k);
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> groups, quant.optional_object("config_groups"));
  if (!groups || groups->json().empty()) return quant.mismatch("config_groups", "at least one config group");
  Nvfp4Spec n;
  n.layout = Nvfp4Layout::kCompressedTensors;
  bool first = true;
  for (const auto& [name, value] : groups->json().items()) {
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> group, groups->optional_object(name));
    if (!group) return groups->mismatch(name, "a config group object");
    D0_ASSIGN_OR_RETURN(std::string group_format, group->optional_string("format", "nvfp4-pack-quantized"));
    if (group_format != "nvfp4-pack-quantized") {
      return nvfp4_unsupported(*group, "format", "\"nvfp4-pack-quantized\"", "\"" + group_format + "\"");
    }
    if (group->present("output_activations")) {
      return nvfp4_unsupported(*group, "output_activations", "null", "output quantization");
    }
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> weights, group->optional_object("weights"));
    if (!weights) return group->mismatch("weights", "an object (weight quantization arguments)");
    D0_RETURN_IF_ERROR(check_nvfp4_args(*weights, false));
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> inputs, group->optional_object("input_activations"));
    if (inputs) D0_RETURN_IF_ERROR(check_nvfp4_args(*inputs, true));
    if (!first && n.activation_scales != inputs.has_value()) {
      return nvfp4_unsupported(*group, "input_activations", "the same in every config group",
                               inputs ? "an object" : "null");
    }
    n.activation_scales = inputs.has_value();
    D0_ASSIGN_OR_RETURN(std::vector<std::string> targets, group->optional_string_list("targets"));
    if (targets.empty()) return group->mismatch("targets", "a non-empty list of module targets");
    n.targets.insert(n.targets.end(), targets.begin(), targets.end());
    first = false;
  }
  D0_ASSIGN_OR_RETURN(n.ignore, quant.optional_string_list("ignore"));
  D0_RETURN_IF_ERROR(check_patterns(quant, "config_groups", n.targets));
  D0_RETURN_IF_ERROR(check_patterns(quant, "ignore", n.ignore));
  spec.weights.nvfp4 = std::move(n);
  return Status::ok();
}

nlohmann::json nvfp4_quantization_config(const Nvfp4Spec& nvfp4) {
  if (nvfp4.layout == Nvfp4Layout::kModelOpt) {
    return {{"quant_method", "modelopt"},
            {"quant_algo", "NVFP4"},
            {"group_size", kNvfp4Group},
            {"exclude_modules", nvfp4.ignore},
            {"kv_cache_quant_algo", nullptr}};
  }
  const nlohmann::json args = {
      {"num_bits", 4},     {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", kNvfp4Group},
      {"symmetric", true}, {"dynamic", false}};
  nlohmann::json inputs = nullptr;
  if (nvfp4.activation_scales) {
    inputs = args;
    inputs["dynamic"] = "local";
  }
  const nlohmann::json group = {{"targets", nvfp4.targets},
                                {"weights", args},
                                {"input_activations", inputs},
                                {"output_activations", nullptr},
                                {"format", "nvfp4-pack-quantized"}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "nvfp4-pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", group}}},
          {"ignore", nvfp4.ignore},
          {"kv_cache_scheme", nullptr}};
}

bool nvfp4_module(const Nvfp4Spec& nvfp4, const std::string& module) {
  if (nvfp4.layout == Nvfp4Layout::kNone) return false;
  bool targeted = false;
  for (const auto& t : nvfp4.targets) {
    if (t == "Linear" || (t.starts_with("re:") && matches_module_pattern(t, module))) {
      targeted = true;
      break;
    }
  }
  if (!targeted) return false;
  for (const auto& i : nvfp4.ignore) {
    const std::string pattern = nvfp4.layout == Nvfp4Layout::kModelOpt ? glob_to_module_pattern(i) : i;
    if (matches_module_pattern(pattern, module)) return false;
  }
  return true;
}

Nvfp4TensorNames nvfp4_tensor_names(Nvfp4Layout layout, const std::string& stem) {
  if (layout == Nvfp4Layout::kCompressedTensors) {
    return {stem + ".weight_packed", stem + ".weight_scale", stem + ".weight_global_scale",
            stem + ".input_global_scale"};
  }
  return {stem + ".weight", stem + ".weight_scale", stem + ".weight_scale_2", stem + ".input_scale"};
}

}  // namespace day0
