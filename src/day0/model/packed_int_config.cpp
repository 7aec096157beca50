#include "day0/model/packed_int_config.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "day0/tokenizer/regex.h"

namespace day0 {
namespace {

constexpr size_t kMaxPatternBytes = 4096;

Status not_supported(const ConfigReader& r, std::string_view key, const std::string& what) {
  return unsupported(
      fmt::format("{}: {}: {} (Day0 loads compressed-tensors weight-only int4/int8 "
                  "pack-quantized checkpoints)",
                  r.source(), r.key_path(key), what));
}

// Weight arguments of one config group.
Status parse_weights(const ConfigReader& w, PackedIntSpec& out) {
  D0_ASSIGN_OR_RETURN(std::string type, w.optional_string("type", "int"));
  if (type != "int") return not_supported(w, "type", fmt::format("\"{}\" weights", type));
  D0_ASSIGN_OR_RETURN(int64_t bits, w.required_int("num_bits", 1, 64));
  if (bits != 4 && bits != 8) return not_supported(w, "num_bits", fmt::format("{} bits", bits));
  D0_ASSIGN_OR_RETURN(bool symmetric, w.optional_bool("symmetric", true));
  D0_ASSIGN_OR_RETURN(std::string strategy, w.optional_string("strategy", "tensor"));
  int64_t group = 0;
  if (strategy == "group") {
    D0_ASSIGN_OR_RETURN(group, w.required_int("group_size", 1, 1 << 20));
  } else if (strategy == "channel") {
    w.mark_used("group_size");
  } else {
    return not_supported(w, "strategy", fmt::format("strategy \"{}\" (supported: group, channel)", strategy));
  }
  D0_ASSIGN_OR_RETURN(bool dynamic, w.optional_bool("dynamic", false));
  if (dynamic) return not_supported(w, "dynamic", "dynamic weight quantization");
  // Activation ordering stores a g_idx permutation the loader does not apply.
  if (w.present("actorder")) {
    return not_supported(w, "actorder", fmt::format("act-order ({})", w.json().at("actorder").dump()));
  }
  if (w.present("block_structure")) return not_supported(w, "block_structure", "block strategy");
  for (const char* k : {"observer", "observer_kwargs", "scale_dtype", "zp_dtype", "actorder"}) w.mark_used(k);
  out.bits = static_cast<int>(bits);
  out.group_size = group;
  out.symmetric = symmetric;
  return Status::ok();
}

// Compiled "re:" patterns (PCRE2, whose match limits bound a pathological pattern), shared by every
// lookup: a manifest asks once per tensor. Anchored at the start of the name, as Python's re.match.
Result<const tokenizer::Regex*> compiled(const std::string& pattern) {
  static std::mutex mutex;
  static std::map<std::string, tokenizer::Regex> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(pattern);
  if (it == cache.end()) {
    if (pattern.size() > kMaxPatternBytes) {
      return invalid_argument(
          fmt::format("pattern of {} bytes (at most {})", pattern.size(), kMaxPatternBytes));
    }
    D0_ASSIGN_OR_RETURN(tokenizer::Regex re, tokenizer::Regex::compile("^(?:" + pattern + ")"));
    it = cache.emplace(pattern, std::move(re)).first;
  }
  return &it->second;
}

bool is_head_module(const std::string& module) {
  return module == "lm_head" || module == "language_model.lm_head";
}

nlohmann::json compressed_tensors_group(const PackedIntSpec& packed, int bits,
                                        const std::vector<std::string>& targets) {
  nlohmann::json weights = {
      {"num_bits", bits},
      {"type", "int"},
      {"symmetric", packed.symmetric},
      {"strategy", packed.group_size > 0 ? "group" : "channel"},
      {"group_size", packed.group_size > 0 ? nlohmann::json(packed.group_size) : nullptr},
      {"dynamic", false},
      {"actorder", nullptr},
      {"block_structure", nullptr},
      {"observer", "minmax"},
      {"observer_kwargs", nlohmann::json::object()}};
  return {{"targets", targets},
          {"weights", weights},
          {"input_activations", nullptr},
          {"output_activations", nullptr},
          {"format", "pack-quantized"}};
}

}  // namespace

bool matches_module_pattern(const std::string& target, const std::string& module) {
  if (!target.starts_with("re:")) return target == module;
  auto re = compiled(target.substr(3));
  if (!re.is_ok()) return false;  // refused when the config was parsed
  bool found = false;
  (*re)->for_each_match(module, [&](size_t begin, size_t) { found = found || begin == 0; });
  return found;
}

Status validate_module_pattern(const std::string& pattern) {
  if (!pattern.starts_with("re:")) return Status::ok();
  auto re = compiled(pattern.substr(3));
  return re.is_ok() ? Status::ok() : re.status();
}

Status parse_compressed_tensors(const ConfigReader& quant, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::string format, quant.optional_string("format", ""));
  if (format != "pack-quantized") {
    return not_supported(quant, "format", fmt::format("format \"{}\"", format));
  }
  D0_ASSIGN_OR_RETURN(std::string status, quant.optional_string("quantization_status", "compressed"));
  if (status != "compressed") {
    return not_supported(quant, "quantization_status",
                         fmt::format("status \"{}\" (expected compressed)", status));
  }
  if (quant.present("kv_cache_scheme"))
    return not_supported(quant, "kv_cache_scheme", "a quantized KV cache");
  if (quant.present("transform_config")) return not_supported(quant, "transform_config", "weight transforms");
  if (quant.present("sparsity_config") && !quant.json().at("sparsity_config").empty()) {
    return not_supported(quant, "sparsity_config", "sparse weights");
  }
  for (const char* k : {"version", "global_compression_ratio", "sparsity_config"}) quant.mark_used(k);
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> groups, quant.optional_object("config_groups"));
  if (!groups || groups->json().empty()) return quant.mismatch("config_groups", "at least one config group");
  PackedIntSpec packed;
  bool first = true;
  int64_t head_group_size = 0;
  bool head_symmetric = true;
  for (const auto& [name, value] : groups->json().items()) {
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> group, groups->optional_object(name));
    if (!group) return groups->mismatch(name, "a config group object");
    if (group->present("input_activations")) {
      return not_supported(*group, "input_activations", "activation quantization");
    }
    if (group->present("output_activations")) {
      return not_supported(*group, "output_activations", "output quantization");
    }
    D0_ASSIGN_OR_RETURN(std::string group_format, group->optional_string("format", format));
    if (group_format != "pack-quantized") {
      return not_supported(*group, "format", fmt::format("format \"{}\"", group_format));
    }
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> weights, group->optional_object("weights"));
    if (!weights) return group->mismatch("weights", "an object (weight quantization arguments)");
    PackedIntSpec args;
    D0_RETURN_IF_ERROR(parse_weights(*weights, args));
    D0_ASSIGN_OR_RETURN(std::vector<std::string> targets, group->optional_string_list("targets"));
    if (targets.empty()) return group->mismatch("targets", "a non-empty list of module targets");
    if (targets.size() == 1 && is_head_module(targets[0])) {  // the head group, checked after the loop
      if (packed.head_bits != 0) return not_supported(*group, "targets", "two config groups for the LM head");
      packed.head_bits = args.bits;
      packed.head_target = targets[0];
      head_group_size = args.group_size;
      head_symmetric = args.symmetric;
      continue;
    }
    if (!first && (args.bits != packed.bits || args.group_size != packed.group_size ||
                   args.symmetric != packed.symmetric)) {
      return not_supported(*group, "weights", "config groups with different schemes");
    }
    packed.bits = args.bits;
    packed.group_size = args.group_size;
    packed.symmetric = args.symmetric;
    packed.targets.insert(packed.targets.end(), targets.begin(), targets.end());
    first = false;
  }
  if (first) return quant.mismatch("config_groups", "a group for the projections besides the LM head's");
  if (packed.head_bits != 0 && (head_group_size != packed.group_size || head_symmetric != packed.symmetric)) {
    return not_supported(*groups, "weights", "an LM head group with another group size or symmetry");
  }
  D0_ASSIGN_OR_RETURN(packed.ignore, quant.optional_string_list("ignore"));
  for (const auto& pattern : packed.targets) {
    if (!pattern.starts_with("re:")) continue;
    if (auto re = compiled(pattern.substr(3)); !re.is_ok()) {
      return quant.invalid("config_groups", fmt::format("target \"{}\" is not a valid regex: {}", pattern,
                                                        re.status().message()));
    }
  }
  for (const auto& pattern : packed.ignore) {
    if (!pattern.starts_with("re:")) continue;
    if (auto re = compiled(pattern.substr(3)); !re.is_ok()) {
      return quant.invalid("ignore",
                           fmt::format("\"{}\" is not a valid regex: {}", pattern, re.status().message()));
    }
  }
  spec.weights.packed = std::move(packed);
  return Status::ok();
}

nlohmann::json compressed_tensors_config(const PackedIntSpec& packed) {
  nlohmann::json groups = {{"group_0", compressed_tensors_group(packed, packed.bits, packed.targets)}};
  if (packed.head_bits != 0) {
    groups["group_1"] = compressed_tensors_group(packed, packed.head_bits, {packed.head_target});
  }
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", groups},
          {"ignore", packed.ignore},
          {"kv_cache_scheme", nullptr},
          {"global_compression_ratio", nullptr},
          {"sparsity_config", nlohmann::json::object()}};
}

int packed_bits_of(const PackedIntSpec& packed, const std::string& module) {
  return packed.head_bits != 0 && module == packed.head_target ? packed.head_bits : packed.bits;
}

bool packs_module(const PackedIntSpec& packed, const std::string& module, bool is_linear) {
  // Only Linear weights are packed, whatever a pattern would also match (an embedding, a norm).
  if (packed.bits == 0 || !is_linear) return false;
  bool targeted = false;
  if (is_head_module(module)) {
    targeted = packed.head_bits != 0 && module == packed.head_target;
    for (const auto& i : packed.ignore) {
      if (matches_module_pattern(i, module)) return false;
    }
    return targeted;
  }
  for (const auto& t : packed.targets) {
    if (t == "Linear" || (t.starts_with("re:") && matches_module_pattern(t, module))) {
      targeted = true;
      break;
    }
  }
  if (!targeted) return false;
  for (const auto& i : packed.ignore) {
    if (matches_module_pattern(i, module)) return false;
  }
  return true;
}

std::string packed_int_label(const PackedIntSpec& packed) {
  const char* layout = packed.layout == PackedIntLayout::kGptq  ? " (GPTQ)"
                       : packed.layout == PackedIntLayout::kAwq ? " (AWQ)"
                                                                : "";
  return fmt::format(
      "int{} {} {}{}{}", packed.bits,
      packed.group_size > 0 ? fmt::format("g{}", packed.group_size) : std::string("channel"),
      packed.symmetric ? "sym" : "asym", layout,
      packed.head_bits != 0 ? fmt::format(", int{} LM head", packed.head_bits) : std::string());
}

Status parse_gptq(const ConfigReader& quant, ModelSpec& spec) {
  PackedIntSpec p;
  p.layout = PackedIntLayout::kGptq;
  D0_ASSIGN_OR_RETURN(int64_t bits, quant.required_int("bits", 1, 64));
  if (bits != 4 && bits != 8) return not_supported(quant, "bits", fmt::format("{}-bit GPTQ", bits));
  p.bits = static_cast<int>(bits);
  D0_ASSIGN_OR_RETURN(int64_t group, quant.optional_int("group_size", 128, -1, 1 << 20));
  if (group == 0) return quant.mismatch("group_size", "a positive group size or -1 (per channel)");
  p.group_size = group < 0 ? 0 : group;
  D0_ASSIGN_OR_RETURN(p.symmetric, quant.optional_bool("sym", true));
  // Act-order checkpoints are read through g_idx, which the loader always applies.
  D0_ASSIGN_OR_RETURN(bool desc_act, quant.optional_bool("desc_act", false));
  (void)desc_act;
  D0_ASSIGN_OR_RETURN(std::string format, quant.optional_string("checkpoint_format", "gptq"));
  if (format != "gptq" && format != "gptq_v2") {
    return not_supported(quant, "checkpoint_format", fmt::format("GPTQ checkpoint format \"{}\"", format));
  }
  p.zero_offset = format == "gptq";
  if (quant.present("modules_in_block_to_quantize")) {
    return not_supported(quant, "modules_in_block_to_quantize", "a partial GPTQ module list");
  }
  for (const char* k : {"damp_percent",
                        "true_sequential",
                        "model_name_or_path",
                        "model_file_base_name",
                        "static_groups",
                        "lm_head",
                        "quant_method",
                        "tokenizer",
                        "dataset",
                        "use_cuda_fp16",
                        "use_exllama",
                        "max_input_length",
                        "exllama_config",
                        "cache_block_outputs",
                        "batch_size",
                        "pad_token_id",
                        "module_name_preceding_first_block",
                        "block_name_to_quantize",
                        "backend",
                        "meta",
                        "pack_dtype",
                        "format",
                        "damp_auto_increment",
                        "desc_act"}) {
    quant.mark_used(k);
  }
  p.targets = {"Linear"};
  p.ignore = {"lm_head"};
  spec.weights.packed = std::move(p);
  return Status::ok();
}

Status parse_awq(const ConfigReader& quant, ModelSpec& spec) {
  PackedIntSpec p;
  p.layout = PackedIntLayout::kAwq;
  D0_ASSIGN_OR_RETURN(int64_t bits, quant.optional_int("bits", 4, 1, 64));
  if (bits != 4) return not_supported(quant, "bits", fmt::format("{}-bit AWQ", bits));
  p.bits = 4;
  D0_ASSIGN_OR_RETURN(p.group_size, quant.optional_int("group_size", 128, 1, 1 << 20));
  D0_ASSIGN_OR_RETURN(bool zero_point, quant.optional_bool("zero_point", true));
  if (!zero_point) return not_supported(quant, "zero_point", "AWQ without zero points");
  p.symmetric = false;
  D0_ASSIGN_OR_RETURN(std::string version, quant.optional_string("version", "gemm"));
  if (version != "gemm" && version != "GEMM") {
    return not_supported(quant, "version", fmt::format("AWQ version \"{}\" (supported: gemm)", version));
  }
  D0_ASSIGN_OR_RETURN(std::vector<std::string> skip, quant.optional_string_list("modules_to_not_convert"));
  p.targets = {"Linear"};
  p.ignore = {"lm_head"};
  // transformers skips a module whose name contains an entry.
  for (const auto& s : skip) {
    std::string escaped;
    for (char c : s) {
      if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) escaped += '\\';
      escaped += c;
    }
    p.ignore.push_back("re:.*" + escaped);
  }
  for (const char* k :
       {"quant_method", "backend", "do_fuse", "fuse_max_seq_len", "modules_to_fuse", "exllama_config"}) {
    quant.mark_used(k);
  }
  spec.weights.packed = std::move(p);
  return Status::ok();
}

nlohmann::json packed_int_quantization_config(const PackedIntSpec& packed) {
  switch (packed.layout) {
    case PackedIntLayout::kGptq:
      return {{"quant_method", "gptq"},
              {"bits", packed.bits},
              {"group_size", packed.group_size > 0 ? packed.group_size : -1},
              {"sym", packed.symmetric},
              {"desc_act", false},
              {"checkpoint_format", packed.zero_offset ? "gptq" : "gptq_v2"}};
    case PackedIntLayout::kAwq: {
      nlohmann::json skip = nlohmann::json::array();
      for (const auto& i : packed.ignore) {
        if (i == "lm_head") continue;
        std::string plain;
        const std::string body = i.starts_with("re:.*") ? i.substr(5) : i;
        for (size_t k = 0; k < body.size(); ++k) {
          if (body[k] == '\\' && k + 1 < body.size()) ++k;
          plain += body[k];
        }
        skip.push_back(plain);
      }
      return {{"quant_method", "awq"},
              {"bits", packed.bits},
              {"group_size", packed.group_size},
              {"zero_point", true},
              {"version", "gemm"},
              {"modules_to_not_convert", skip.empty() ? nlohmann::json(nullptr) : skip}};
    }
    case PackedIntLayout::kCompressedTensors:
      break;
  }
  return compressed_tensors_config(packed);
}

}  // namespace day0
