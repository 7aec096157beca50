#include "day0/model/config_common.h"

#include <fmt/format.h>

#include <limits>

#include "day0/model/nvfp4_config.h"
#include "day0/model/packed_int_config.h"

namespace day0 {

namespace {

Result<DType> parse_torch_dtype(const ConfigReader& cfg) {
  // transformers v5 renamed torch_dtype to dtype (4.56+ writes dtype too).
  cfg.mark_used("dtype");
  const char* key = cfg.present("torch_dtype") ? "torch_dtype" : "dtype";
  D0_ASSIGN_OR_RETURN(std::string name, cfg.optional_string(key, "bfloat16"));
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16") return DType::kF16;
  if (name == "float32") return DType::kF32;
  return cfg.mismatch(key, "\"bfloat16\", \"float16\" or \"float32\"");
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return "float16";
    case DType::kF32:
      return "float32";
    default:
      return "bfloat16";
  }
}

Result<RopeType> parse_rope_type(const ConfigReader& rope) {
  // "type" is the legacy spelling (some releases' remote code still reads it); both may be present.
  const char* key = rope.present("rope_type") ? "rope_type" : "type";
  if (rope.present("rope_type") && rope.present("type")) {
    D0_ASSIGN_OR_RETURN(std::string a, rope.required_string("rope_type"));
    D0_ASSIGN_OR_RETURN(std::string b, rope.required_string("type"));
    if (a != b) return rope.invalid("type", fmt::format("\"{}\" disagrees with rope_type \"{}\"", b, a));
  }
  rope.mark_used("type");
  D0_ASSIGN_OR_RETURN(std::string name, rope.optional_string(key, "default"));
  if (name == "default") return RopeType::kDefault;
  if (name == "linear") return RopeType::kLinear;
  if (name == "dynamic") return RopeType::kDynamic;
  if (name == "llama3") return RopeType::kLlama3;
  if (name == "yarn") return RopeType::kYarn;
  if (name == "proportional") return RopeType::kProportional;
  return unsupported(
      fmt::format("{}: {}: RoPE scaling type \"{}\" is not supported (supported: default, "
                  "linear, dynamic, llama3, yarn, proportional)",
                  rope.source(), rope.key_path(key), name));
}

}  // namespace

namespace {

// One rope_parameters / rope_scaling object into spec.rope (and spec.partial_rotary_factor when it
// holds one).
Status parse_rope_object(const ConfigReader& rope, ModelSpec& spec) {
  // transformers 5 moves partial_rotary_factor into rope_parameters.
  if (rope.present("partial_rotary_factor")) {
    D0_ASSIGN_OR_RETURN(spec.partial_rotary_factor, rope.required_double("partial_rotary_factor"));
    if (!(spec.partial_rotary_factor > 0.0 && spec.partial_rotary_factor <= 1.0)) {
      return rope.mismatch("partial_rotary_factor", "a number in (0, 1]");
    }
  }
  D0_ASSIGN_OR_RETURN(spec.rope.type, parse_rope_type(rope));
  RopeScaling& r = spec.rope;
  switch (r.type) {
    case RopeType::kNone:
    case RopeType::kDefault:
      return Status::ok();
    case RopeType::kLinear:
    case RopeType::kDynamic: {
      D0_ASSIGN_OR_RETURN(r.factor, rope.required_double("factor"));
      break;
    }
    case RopeType::kProportional: {
      // The object's own partial_rotary_factor (1 when absent, whatever the top level says) picks the
      // frequencies that rotate; the rotation spans the whole head.
      D0_ASSIGN_OR_RETURN(r.factor, rope.optional_double("factor", 1.0));
      D0_ASSIGN_OR_RETURN(r.proportional_share, rope.optional_double("partial_rotary_factor", 1.0));
      if (!(r.proportional_share > 0.0 && r.proportional_share <= 1.0)) {
        return rope.mismatch("partial_rotary_factor", "a number in (0, 1]");
      }
      spec.partial_rotary_factor = 1.0;
      break;
    }
    case RopeType::kLlama3: {
      D0_ASSIGN_OR_RETURN(r.factor, rope.required_double("factor"));
      D0_ASSIGN_OR_RETURN(r.low_freq_factor, rope.required_double("low_freq_factor"));
      D0_ASSIGN_OR_RETURN(r.high_freq_factor, rope.required_double("high_freq_factor"));
      D0_ASSIGN_OR_RETURN(r.original_max_position, rope.required_int("original_max_position_embeddings"));
      // Equal factors (a release ships 1 and 1) leave no medium band: transformers accepts them.
      if (r.high_freq_factor < r.low_freq_factor) {
        return rope.invalid("high_freq_factor", "must be at least low_freq_factor");
      }
      break;
    }
    case RopeType::kYarn: {
      D0_ASSIGN_OR_RETURN(r.original_max_position,
                          rope.optional_int("original_max_position_embeddings", 0, 1));
      const int64_t original =
          r.original_max_position ? r.original_max_position : spec.max_position_embeddings;
      // transformers derives a missing factor from the context extension.
      D0_ASSIGN_OR_RETURN(r.factor,
                          rope.optional_double("factor", static_cast<double>(spec.max_position_embeddings) /
                                                             static_cast<double>(original)));
      D0_ASSIGN_OR_RETURN(r.beta_fast, rope.optional_double("beta_fast", 32.0));
      D0_ASSIGN_OR_RETURN(r.beta_slow, rope.optional_double("beta_slow", 1.0));
      D0_ASSIGN_OR_RETURN(r.mscale, rope.optional_double("mscale", 0.0));
      D0_ASSIGN_OR_RETURN(r.mscale_all_dim, rope.optional_double("mscale_all_dim", 0.0));
      D0_ASSIGN_OR_RETURN(r.truncate, rope.optional_bool("truncate", true));
      if (rope.present("attention_factor")) {
        D0_ASSIGN_OR_RETURN(double attention_factor, rope.required_double("attention_factor"));
        r.attention_factor = attention_factor;
      }
      break;
    }
  }
  if (!(r.factor > 0.0)) return rope.mismatch("factor", "a positive number");
  return Status::ok();
}

}  // namespace

Status parse_rope_parameters_object(const ConfigReader& rope, ModelSpec& spec) {
  return parse_rope_object(rope, spec);
}

Status parse_rope(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> params, cfg.optional_object("rope_parameters"));
  if (params) {
    D0_ASSIGN_OR_RETURN(spec.rope_theta, params->optional_double("rope_theta", spec.rope_theta));
  } else {
    D0_ASSIGN_OR_RETURN(params, cfg.optional_object("rope_scaling"));
  }
  spec.rope = RopeScaling{};
  if (!params) return Status::ok();
  return parse_rope_object(*params, spec);
}

Status parse_rope_by_layer_type(const ConfigReader& cfg, const LayerRope& full, const LayerRope& sliding,
                                ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> params, cfg.optional_object("rope_parameters"));
  auto one = [&](const char* type, const LayerRope& fallback) -> Result<LayerRope> {
    ModelSpec kind = spec;  // the sizes a derived YaRN factor reads
    kind.rope_theta = fallback.theta;
    kind.partial_rotary_factor = fallback.partial_rotary_factor;
    kind.rope = fallback.scaling;
    std::optional<ConfigReader> entry;
    if (params) {
      D0_ASSIGN_OR_RETURN(entry, params->optional_object(type));
    }
    if (entry) {
      D0_ASSIGN_OR_RETURN(kind.rope_theta, entry->optional_double("rope_theta", fallback.theta));
      kind.rope = RopeScaling{};
      D0_RETURN_IF_ERROR(parse_rope_object(*entry, kind));
      if (!(kind.rope_theta > 0.0)) return entry->mismatch("rope_theta", "a positive number");
    }
    return LayerRope{kind.rope_theta, kind.partial_rotary_factor, kind.rope};
  };
  D0_ASSIGN_OR_RETURN(LayerRope f, one("full_attention", full));
  D0_ASSIGN_OR_RETURN(LayerRope s, one("sliding_attention", sliding));
  spec.rope_theta = f.theta;
  spec.partial_rotary_factor = f.partial_rotary_factor;
  spec.rope = f.scaling;
  spec.sliding_rope.reset();
  if (!(s == f)) spec.sliding_rope = s;
  return Status::ok();
}

namespace {

// One entry of a keyed rope_parameters.
nlohmann::json write_typed_rope(double theta, double partial_rotary_factor, const RopeScaling& scaling) {
  ModelSpec kind;
  kind.rope = scaling;
  nlohmann::json out = write_rope_scaling(kind);
  if (out.is_null()) out = {{"rope_type", "default"}};
  out.erase("type");
  out["rope_theta"] = theta;
  out["partial_rotary_factor"] =
      scaling.type == RopeType::kProportional ? scaling.proportional_share : partial_rotary_factor;
  return out;
}

}  // namespace

void write_rope_by_layer_type(const ModelSpec& spec, nlohmann::json& out) {
  const LayerRope sliding =
      spec.sliding_rope.value_or(LayerRope{spec.rope_theta, spec.partial_rotary_factor, spec.rope});
  out["rope_parameters"] = {
      {"full_attention", write_typed_rope(spec.rope_theta, spec.partial_rotary_factor, spec.rope)},
      {"sliding_attention", write_typed_rope(sliding.theta, sliding.partial_rotary_factor, sliding.scaling)}};
  out.erase("rope_theta");
  out.erase("rope_scaling");
}

Status parse_quantization(const ConfigReader& cfg, ModelSpec& spec) {
  spec.weights = QuantSpec{};
  spec.weights.format = spec.activation_dtype == DType::kF16   ? WeightFormat::kF16
                        : spec.activation_dtype == DType::kF32 ? WeightFormat::kF32
                                                               : WeightFormat::kBF16;
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> quant, cfg.optional_object("quantization_config"));
  if (!quant) return Status::ok();
  D0_ASSIGN_OR_RETURN(std::string method, quant->required_string("quant_method"));
  if (method == "fp8") {
    spec.weights.format = WeightFormat::kFp8Block;
    D0_ASSIGN_OR_RETURN(std::vector<int64_t> block,
                        quant->optional_int_list("weight_block_size", 1, 1 << 20));
    if (block.empty()) {
      return unsupported(
          fmt::format("{}: quantization_config.weight_block_size: per-tensor FP8 (no block size) "
                      "is not supported; expected [rows, cols]",
                      cfg.source()));
    }
    if (block.size() != 2) return quant->mismatch("weight_block_size", "a list of two integers [rows, cols]");
    spec.weights.block_rows = block[0];
    spec.weights.block_cols = block[1];
    D0_ASSIGN_OR_RETURN(std::string fmt_name, quant->optional_string("fmt", "e4m3"));
    if (fmt_name != "e4m3" && fmt_name != "float8_e4m3fn") {
      return quant->mismatch("fmt", "\"e4m3\" (the only FP8 weight format supported)");
    }
    D0_ASSIGN_OR_RETURN(std::string scheme, quant->optional_string("activation_scheme", "dynamic"));
    if (scheme != "dynamic") {
      return unsupported(
          fmt::format("{}: quantization_config.activation_scheme: \"{}\" is not supported "
                      "(Day0 keeps activations unquantized, as \"dynamic\" checkpoints allow)",
                      cfg.source(), scheme));
    }
    // Which modules stay unquantized is the weight table's (verify checks each tensor's dtype).
    quant->mark_used("modules_to_not_convert");
    D0_ASSIGN_OR_RETURN(std::string scale_fmt, quant->optional_string("scale_fmt", ""));
    if (!scale_fmt.empty() && scale_fmt != "ue8m0" && scale_fmt != "float") {
      return quant->mismatch("scale_fmt", "\"ue8m0\" or \"float\"");
    }
    spec.weights.ue8m0_scales = scale_fmt == "ue8m0";
    // DeepSeek-V4: routed experts in FP4 (E2M1) with E8M0 scales per 32 input columns. Its release writes
    // expert_dtype beside quantization_config; transformers moves it in unless one is named there.
    D0_ASSIGN_OR_RETURN(std::string released, cfg.optional_string("expert_dtype", "fp8"));
    D0_ASSIGN_OR_RETURN(std::string expert_dtype, quant->optional_string("expert_dtype", released));
    if (expert_dtype == "fp4") {
      spec.weights.fp4_expert_group = 32;
    } else if (expert_dtype != "fp8") {
      return quant->mismatch("expert_dtype", "\"fp8\" or \"fp4\"");
    }
    return Status::ok();
  }
  if (method == "mxfp4") {
    spec.weights.format = WeightFormat::kMxfp4;
    // The weight table knows which modules stay unquantized (attention, router, embeddings).
    quant->mark_used("modules_to_not_convert");
    spec.weights.block_rows = 1;
    spec.weights.block_cols = 32;
    return Status::ok();
  }
  if (method == "modelopt") return parse_modelopt_quantization(*quant, spec);
  if (method == "compressed-tensors") {
    D0_ASSIGN_OR_RETURN(std::string format, quant->optional_string("format", ""));
    if (format == "nvfp4-pack-quantized") return parse_compressed_tensors_nvfp4(*quant, spec);
    return parse_compressed_tensors(*quant, spec);
  }
  if (method == "gptq") return parse_gptq(*quant, spec);
  if (method == "awq") return parse_awq(*quant, spec);
  return unsupported(
      fmt::format("{}: quantization_config.quant_method: \"{}\" is not supported (supported: "
                  "fp8 with weight_block_size, mxfp4, modelopt NVFP4, compressed-tensors pack-quantized or "
                  "nvfp4-pack-quantized, gptq, awq)",
                  cfg.source(), method));
}

Status parse_attention_bias(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(bool bias, cfg.optional_bool("attention_bias", false));
  spec.qkv_bias = bias;
  spec.o_bias = bias;
  return Status::ok();
}

Status parse_core(const ConfigReader& cfg, const FamilyDefaults& defaults, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(spec.vocab_size, cfg.required_int("vocab_size"));
  D0_ASSIGN_OR_RETURN(spec.hidden_size, cfg.required_int("hidden_size"));
  D0_ASSIGN_OR_RETURN(spec.n_layers, cfg.required_int("num_hidden_layers", 1, kMaxLayers));
  D0_ASSIGN_OR_RETURN(spec.n_heads, cfg.required_int("num_attention_heads"));
  D0_ASSIGN_OR_RETURN(spec.n_kv_heads, cfg.optional_int("num_key_value_heads", spec.n_heads, 1));
  if (spec.n_heads % spec.n_kv_heads != 0) {
    return cfg.invalid("num_key_value_heads", fmt::format("must divide num_attention_heads ({}), found {}",
                                                          spec.n_heads, spec.n_kv_heads));
  }
  int64_t head_dim_default = defaults.head_dim;
  if (head_dim_default == 0) {
    if (spec.hidden_size % spec.n_heads != 0 && !cfg.present("head_dim")) {
      return cfg.invalid("head_dim", fmt::format("absent, and hidden_size ({}) is not a multiple of "
                                                 "num_attention_heads ({})",
                                                 spec.hidden_size, spec.n_heads));
    }
    head_dim_default = spec.hidden_size / spec.n_heads;
  }
  D0_ASSIGN_OR_RETURN(spec.head_dim, cfg.optional_int("head_dim", head_dim_default, 1));
  if (defaults.require_intermediate) {
    D0_ASSIGN_OR_RETURN(spec.intermediate_size, cfg.required_int("intermediate_size"));
  }
  D0_ASSIGN_OR_RETURN(spec.max_position_embeddings,
                      cfg.optional_int("max_position_embeddings", defaults.max_position_embeddings, 1));
  D0_ASSIGN_OR_RETURN(spec.rms_norm_eps, cfg.optional_double("rms_norm_eps", defaults.rms_norm_eps));
  if (!(spec.rms_norm_eps > 0.0)) return cfg.mismatch("rms_norm_eps", "a positive number");
  D0_ASSIGN_OR_RETURN(spec.rope_theta, cfg.optional_double("rope_theta", defaults.rope_theta));
  // Top level in transformers 4; parse_rope overrides it from rope_parameters (transformers 5).
  D0_ASSIGN_OR_RETURN(spec.partial_rotary_factor,
                      cfg.optional_double("partial_rotary_factor", defaults.partial_rotary_factor));
  if (!(spec.partial_rotary_factor > 0.0 && spec.partial_rotary_factor <= 1.0)) {
    return cfg.mismatch("partial_rotary_factor", "a number in (0, 1]");
  }
  D0_RETURN_IF_ERROR(parse_rope(cfg, spec));
  if (!(spec.rope_theta > 0.0)) return cfg.mismatch("rope_theta", "a positive number");
  D0_ASSIGN_OR_RETURN(spec.tie_word_embeddings, cfg.optional_bool("tie_word_embeddings", false));
  D0_ASSIGN_OR_RETURN(spec.activation_dtype, parse_torch_dtype(cfg));
  D0_RETURN_IF_ERROR(parse_quantization(cfg, spec));
  D0_ASSIGN_OR_RETURN(std::string act, cfg.optional_string("hidden_act", "silu"));
  if (act != "silu" && act != "swish") {
    return unsupported(
        fmt::format("{}: hidden_act: \"{}\" is not supported (expected \"silu\")", cfg.source(), act));
  }
  // Dropout is off at inference in transformers, but a non-zero rate says the config was written for
  // training semantics Day0 does not reproduce: refuse rather than guess, unless the family's code was
  // checked to drop only in training.
  D0_ASSIGN_OR_RETURN(double attention_dropout, cfg.optional_double("attention_dropout", 0.0));
  if (defaults.training_only_attention_dropout) {
    if (!(attention_dropout >= 0.0 && attention_dropout < 1.0)) {
      return cfg.mismatch("attention_dropout", "a rate in [0, 1)");
    }
  } else if (attention_dropout != 0.0) {
    return unsupported(fmt::format("{}: attention_dropout: {} is not supported (Day0 implements 0)",
                                   cfg.source(), attention_dropout));
  }
  spec.layers.assign(static_cast<size_t>(spec.n_layers), LayerSpec{});
  for (auto& layer : spec.layers) layer.dense_intermediate = spec.intermediate_size;
  return Status::ok();
}

std::optional<double> config_float(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (!value.is_object() || value.size() != 1 || !value.contains("__float__")) return std::nullopt;
  const nlohmann::json& word = value.at("__float__");
  if (word == "Infinity") return std::numeric_limits<double>::infinity();
  if (word == "-Infinity") return -std::numeric_limits<double>::infinity();
  if (word == "NaN") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

Status require_released(const ConfigReader& cfg, const char* key, const nlohmann::json& released,
                        std::string_view implementation) {
  cfg.mark_used(key);
  if (!cfg.present(key) || cfg.json().at(key) == released) return Status::ok();
  return unsupported(fmt::format("{}: {}: {} is not supported ({} implements {})", cfg.source(),
                                 cfg.key_path(key), describe_json(cfg.json().at(key)), implementation,
                                 released.dump()));
}

void ignore_keys(const ConfigReader& cfg, std::initializer_list<const char*> keys) {
  for (const char* key : keys) cfg.mark_used(key);
}

Result<int64_t> aliased_int(const ConfigReader& cfg, std::initializer_list<const char*> keys, int64_t min,
                            int64_t max, std::optional<int64_t> fallback) {
  std::optional<int64_t> found;
  const char* found_key = nullptr;
  for (const char* key : keys) {
    if (!cfg.present(key)) continue;
    D0_ASSIGN_OR_RETURN(int64_t value, cfg.required_int(key, min, max));
    if (found && *found != value) {
      return cfg.invalid(key, fmt::format("{} disagrees with {} ({}); they name the same setting", value,
                                          found_key, *found));
    }
    found = value;
    found_key = key;
  }
  if (found) return *found;
  if (fallback) return *fallback;
  return cfg.mismatch(*keys.begin(), fmt::format("an integer >= {} (also read as {})", min,
                                                 fmt::join(std::vector<const char*>(keys), " / ")));
}

Result<bool> apply_layer_types(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("layer_types"));
  if (types.empty()) return false;
  if (static_cast<int64_t>(types.size()) != spec.n_layers) {
    return cfg.invalid("layer_types", fmt::format("expected {} entries (num_hidden_layers), found {}",
                                                  spec.n_layers, types.size()));
  }
  for (size_t i = 0; i < types.size(); ++i) {
    LayerSpec& layer = spec.layers[i];
    if (types[i] == "full_attention") {
      layer.mask = AttentionMask::kCausal;
      layer.window = 0;
    } else if (types[i] == "sliding_attention") {
      if (spec.sliding_window <= 0)
        return cfg.mismatch("sliding_window", "a positive window for sliding layers");
      layer.mask = AttentionMask::kSliding;
      layer.window = spec.sliding_window;
    } else if (types[i] == "chunked_attention") {
      if (spec.attention_chunk_size <= 0) {
        return cfg.mismatch("attention_chunk_size", "a positive chunk size for chunked layers");
      }
      layer.mask = AttentionMask::kChunked;
      layer.window = spec.attention_chunk_size;
    } else {
      return cfg.mismatch(fmt::format("layer_types[{}]", i),
                          "\"full_attention\", \"sliding_attention\" or \"chunked_attention\"");
    }
  }
  return true;
}

Result<bool> apply_per_layer_config(const ConfigReader& cfg, ModelSpec& spec) {
  const bool listed = cfg.contains("per_layer_config");
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> per_layer, cfg.optional_object("per_layer_config"));
  if (!per_layer) return listed;
  for (const auto& [key, value] : per_layer->json().items()) {
    size_t digits = 0;
    int64_t i = -1;
    try {
      i = std::stoll(key, &digits);
    } catch (const std::exception&) {
    }
    if (digits != key.size() || i < 0 || i >= spec.n_layers) {
      return per_layer->invalid(key, fmt::format("expected a layer index below {}", spec.n_layers));
    }
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> one, per_layer->optional_object(key));
    if (!one) return per_layer->mismatch(key, "an object of overrides");
    for (const auto& [attr, v] : one->json().items()) {
      if (attr != "head_dim" && attr != "num_key_value_heads") {
        return unsupported(
            fmt::format("{}: {}: a per-layer {} is not supported (Day0 reads per-layer head_dim "
                        "and num_key_value_heads)",
                        cfg.source(), one->key_path(attr), attr));
      }
    }
    LayerSpec& l = spec.layers[static_cast<size_t>(i)];
    D0_ASSIGN_OR_RETURN(l.head_dim, one->optional_int("head_dim", spec.head_dim, 1));
    D0_ASSIGN_OR_RETURN(l.n_kv_heads, one->optional_int("num_key_value_heads", spec.n_kv_heads, 1));
    if (l.head_dim == spec.head_dim) l.head_dim = 0;
    if (l.n_kv_heads == spec.n_kv_heads) l.n_kv_heads = 0;
  }
  return true;
}

void set_all_sliding(ModelSpec& spec, int64_t window) {
  spec.sliding_window = window;
  if (window <= 0) return;
  for (auto& layer : spec.layers) {
    layer.mask = AttentionMask::kSliding;
    layer.window = window;
  }
}

nlohmann::json write_rope_scaling(const ModelSpec& spec) {
  const RopeScaling& r = spec.rope;
  if (r.type == RopeType::kDefault || r.type == RopeType::kNone) return nullptr;
  nlohmann::json out = {{"rope_type", rope_type_name(r.type)}, {"factor", r.factor}};
  if (r.type == RopeType::kLlama3) {
    out["low_freq_factor"] = r.low_freq_factor;
    out["high_freq_factor"] = r.high_freq_factor;
    out["original_max_position_embeddings"] = r.original_max_position;
  }
  if (r.type == RopeType::kYarn) {
    // Legacy "type" too: some releases' remote code reads rope_scaling["type"].
    out["type"] = "yarn";
    if (r.original_max_position) out["original_max_position_embeddings"] = r.original_max_position;
    out["beta_fast"] = r.beta_fast;
    out["beta_slow"] = r.beta_slow;
    if (r.mscale != 0.0) out["mscale"] = r.mscale;
    if (r.mscale_all_dim != 0.0) out["mscale_all_dim"] = r.mscale_all_dim;
    if (r.attention_factor) out["attention_factor"] = *r.attention_factor;
    if (!r.truncate) out["truncate"] = false;
  }
  if (r.type == RopeType::kProportional) out["partial_rotary_factor"] = r.proportional_share;
  return out;
}

void write_core(const ModelSpec& spec, nlohmann::json& out) {
  out["architectures"] = nlohmann::json::array({spec.architecture});
  out["model_type"] = spec.model_type;
  out["vocab_size"] = spec.vocab_size;
  out["hidden_size"] = spec.hidden_size;
  out["num_hidden_layers"] = spec.n_layers;
  out["num_attention_heads"] = spec.n_heads;
  out["num_key_value_heads"] = spec.n_kv_heads;
  out["head_dim"] = spec.head_dim;
  out["intermediate_size"] = spec.intermediate_size;
  out["max_position_embeddings"] = spec.max_position_embeddings;
  out["rms_norm_eps"] = spec.rms_norm_eps;
  out["rope_theta"] = spec.rope_theta;
  out["rope_scaling"] = write_rope_scaling(spec);
  out["tie_word_embeddings"] = spec.tie_word_embeddings;
  out["torch_dtype"] = torch_dtype_name(spec.activation_dtype);
  out["hidden_act"] = "silu";
  if (spec.weights.format == WeightFormat::kFp8Block) {
    out["quantization_config"] = {{"quant_method", "fp8"},
                                  {"fmt", "e4m3"},
                                  {"activation_scheme", "dynamic"},
                                  {"weight_block_size", {spec.weights.block_rows, spec.weights.block_cols}}};
    if (spec.weights.ue8m0_scales) out["quantization_config"]["scale_fmt"] = "ue8m0";
    if (spec.weights.fp4_expert_group != 0) out["quantization_config"]["expert_dtype"] = "fp4";
  } else if (spec.weights.format == WeightFormat::kMxfp4) {
    out["quantization_config"] = {
        {"quant_method", "mxfp4"},
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  } else if (spec.weights.packed.bits != 0) {
    out["quantization_config"] = packed_int_quantization_config(spec.weights.packed);
  } else if (spec.weights.nvfp4.layout != Nvfp4Layout::kNone) {
    out["quantization_config"] = nvfp4_quantization_config(spec.weights.nvfp4);
  }
}

void write_layer_types(const ModelSpec& spec, nlohmann::json& out) {
  nlohmann::json types = nlohmann::json::array();
  for (const auto& layer : spec.layers) {
    types.push_back(layer.mask == AttentionMask::kSliding   ? "sliding_attention"
                    : layer.mask == AttentionMask::kChunked ? "chunked_attention"
                                                            : "full_attention");
  }
  out["layer_types"] = types;
}

Status parse_moe_beside_dense_mlp(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(bool moe_block, cfg.optional_bool("enable_moe_block", false));
  if (!moe_block) {
    ignore_keys(cfg, {"num_experts", "top_k_experts", "moe_intermediate_size"});
    return Status::ok();
  }
  MoeSpec m;
  D0_ASSIGN_OR_RETURN(m.n_experts, cfg.required_int("num_experts"));
  D0_ASSIGN_OR_RETURN(m.experts_per_token, cfg.required_int("top_k_experts", 1, m.n_experts));
  D0_ASSIGN_OR_RETURN(m.expert_intermediate, cfg.required_int("moe_intermediate_size"));
  m.scoring = RouterScoring::kSoftmax;  // float32 over the rounded logits
  m.norm_topk_prob = true;              // the top-k renormalized to sum 1
  m.router_input_norm = m.per_expert_scale = true;
  spec.moe = m;
  spec.dense_mlp_beside_moe = true;
  spec.routing_weights_f32 = true;  // top-k weights (times the per-expert scale) stay float32
  for (LayerSpec& l : spec.layers) l.moe = true;
  return Status::ok();
}

}  // namespace day0
