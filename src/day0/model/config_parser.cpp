#include "day0/model/config_parser.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "day0/core/json_reader.h"
#include "day0/model/config_reader.h"
#include "day0/model/family_registry.h"
#include "day0/model/tensor_manifest.h"
#include "day0/ops/rope_table.h"

namespace day0 {

double derive_attention_scale(const ModelSpec& spec) {
  if (spec.fixed_attention_scale > 0.0) return spec.fixed_attention_scale;
  if (spec.attention == AttentionKind::kMla && spec.mla) {
    const double qk_dim = static_cast<double>(spec.mla->qk_nope_head_dim + spec.mla->qk_rope_head_dim);
    double scale = 1.0 / std::sqrt(qk_dim);
    if (spec.rope.type != RopeType::kDefault && spec.rope.type != RopeType::kNone &&
        spec.rope.mscale_all_dim != 0.0) {
      const double m = yarn_get_mscale(spec.rope.factor, spec.rope.mscale_all_dim);
      scale *= m * m;
    }
    return scale;
  }
  return 1.0 / std::sqrt(static_cast<double>(spec.head_dim));
}

namespace {

// Block-sparse attention: GQA layers, index heads that divide every block-sparse layer's query heads,
// index keys at least as wide as the rotated part, no more local blocks than selected ones.
Status validate_block_indexer(const ModelSpec& spec) {
  const bool any =
      std::any_of(spec.layers.begin(), spec.layers.end(), [](auto& l) { return l.block_sparse; });
  if (!spec.block_indexer) {
    return any ? invalid_argument("model spec: block-sparse layers without a block indexer") : Status::ok();
  }
  const BlockIndexerSpec& ix = *spec.block_indexer;
  if (spec.attention != AttentionKind::kGqa) return invalid_argument("model spec: a block indexer needs GQA");
  if (ix.n_heads <= 0 || ix.head_dim <= 0 || ix.block_size <= 0 || ix.topk_blocks <= 0 ||
      ix.local_blocks < 0 || ix.local_blocks > ix.topk_blocks) {
    return invalid_argument(
        "model spec: block indexer sizes must be positive, with at most topk_blocks local blocks");
  }
  if (ix.head_dim < rotary_dims(spec.head_dim, spec.partial_rotary_factor)) {
    return invalid_argument("model spec: block index keys narrower than the rotated dimensions");
  }
  for (const LayerSpec& l : spec.layers) {
    if (l.block_sparse && (l.linear_attention || layer_heads(spec, l) % ix.n_heads != 0)) {
      return invalid_argument(
          "model spec: a block-sparse layer's query heads must be a multiple of index heads");
    }
  }
  return Status::ok();
}

}  // namespace

Status validate_model_spec(const ModelSpec& spec) {
  if (spec.n_layers <= 0 || static_cast<int64_t>(spec.layers.size()) != spec.n_layers) {
    return invalid_argument(fmt::format("model spec: {} layer entries for num_hidden_layers = {}",
                                        spec.layers.size(), spec.n_layers));
  }
  for (int64_t v : {spec.vocab_size, spec.hidden_size, spec.n_heads, spec.n_kv_heads, spec.head_dim}) {
    if (v <= 0) return invalid_argument("model spec: every size must be positive");
  }
  bool any_moe = false;
  for (const auto& layer : spec.layers) {
    any_moe = any_moe || layer.moe;
    if (layer.n_heads < 0 || layer.n_kv_heads < 0 ||
        layer_heads(spec, layer) % layer_kv_heads(spec, layer) != 0) {
      return invalid_argument("model spec: a layer's query heads must be a multiple of its KV heads");
    }
    if (!layer.moe && !layer.no_ffn && layer.dense_intermediate <= 0) {
      return invalid_argument("model spec: a dense layer needs a positive intermediate size");
    }
  }
  if (any_moe && !spec.moe) return invalid_argument("model spec: MoE layers without MoE parameters");
  for (const auto& layer : spec.layers) {
    if ((layer.no_mixer && layer.no_ffn) || (layer.mamba && (!spec.mamba || !layer.no_ffn)))
      return invalid_argument("model spec: a layer without a block, or a Mamba-2 layer without its sizes");
  }
  if (spec.moe && (spec.moe->n_experts <= 0 || spec.moe->experts_per_token <= 0 ||
                   spec.moe->experts_per_token > spec.moe->n_experts || spec.moe->expert_intermediate <= 0)) {
    return invalid_argument("model spec: MoE sizes must be positive with experts_per_token <= n_experts");
  }
  if ((spec.attention == AttentionKind::kMla) != spec.mla.has_value()) {
    return invalid_argument("model spec: MLA attention and MLA sizes must come together");
  }
  D0_RETURN_IF_ERROR(validate_block_indexer(spec));
  // Building the manifest runs every size product through checked arithmetic.
  auto manifest = build_tensor_manifest(spec);
  if (!manifest.is_ok()) return manifest.status();
  return Status::ok();
}

namespace {

// Keys any transformers config may carry that never change the forward pass at inference: generic
// PretrainedConfig fields, token ids, training-only losses and noise.
const std::set<std::string>& irrelevant_keys() {
  static const std::set<std::string> kKeys = {"_name_or_path",
                                              "transformers_version",
                                              "use_cache",
                                              "initializer_range",
                                              "bos_token_id",
                                              "eos_token_id",
                                              "pad_token_id",
                                              "sep_token_id",
                                              "decoder_start_token_id",
                                              "output_router_logits",
                                              "router_aux_loss_coef",
                                              "router_jitter_noise",
                                              "aux_loss_alpha",
                                              "seq_aux",
                                              "return_dict",
                                              "output_hidden_states",
                                              "output_attentions",
                                              "torchscript",
                                              "use_bfloat16",
                                              "tie_encoder_decoder",
                                              "is_encoder_decoder",
                                              "is_decoder",
                                              "add_cross_attention",
                                              "cross_attention_hidden_size",
                                              "chunk_size_feed_forward",
                                              "pruned_heads",
                                              "tokenizer_class",
                                              "prefix",
                                              "task_specific_params",
                                              "problem_type",
                                              "id2label",
                                              "label2id",
                                              "finetuning_task",
                                              "auto_map",
                                              "keys_to_ignore_at_inference",
                                              "ep_size",
                                              "pretraining_tp",
                                              "num_labels",
                                              "torch_compile",
                                              "use_return_dict",
                                              "tf_legacy_loss"};
  return kKeys;
}

void collect_unknown(const nlohmann::json& object, const std::string& path, const std::set<std::string>& used,
                     std::vector<std::string>& out) {
  for (const auto& [key, value] : object.items()) {
    const std::string key_path = path.empty() ? key : path + "." + key;
    if (used.count(key_path)) {
      // Objects the parser opened (rope_parameters, quantization_config, text_config) are audited
      // key by key too.
      if (value.is_object()) collect_unknown(value, key_path, used, out);
      continue;
    }
    if (irrelevant_keys().count(key)) continue;
    out.push_back(key_path);
  }
}

// An image-text wrapper nests the text model in text_config; dtype and quantization sit at the top. Merge
// them so the family parser sees one object. The wrapper's own quantization_config (the one transformers
// quantizes the whole model by) and tie_word_embeddings (its head sits beside model.language_model) win
// over text_config's.
nlohmann::json text_config_of(const nlohmann::json& root) {
  nlohmann::json text = root.at("text_config");
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!text.contains(key) && root.contains(key)) text[key] = root[key];
  }
  for (const char* key : {"quantization_config", "tie_word_embeddings"}) {
    if (root.contains(key)) text[key] = root[key];
  }
  return text;
}

// Marks every key under `reader`, nested objects included: a part of the config (an image-text wrapper's
// vision tower) that no text-only spec reads and that changes nothing Day0 runs.
void mark_subtree_used(const ConfigReader& reader) {
  for (const auto& [key, value] : reader.json().items()) {
    reader.mark_used(key);
    if (!value.is_object()) continue;
    auto nested = reader.optional_object(key);
    if (nested.is_ok() && nested->has_value()) mark_subtree_used(**nested);
  }
}

std::string mxfp4_families() {
  std::string out;
  for (const FamilyInfo& info : family_registry()) {
    if (!info.mxfp4_experts) continue;
    out += (out.empty() ? "" : ", ") + info.name();
  }
  return out;
}

}  // namespace

std::string unknown_keys_text(const ConfigAudit& audit) {
  std::string out;
  for (const auto& key : audit.unknown_keys) {
    out += fmt::format("{}: unknown field \u2014 may change the math (Day0 does not read it)\n", key);
  }
  return out;
}

Result<ModelSpec> parse_model_config(const nlohmann::json& config, const std::string& source,
                                     ConfigAudit* audit, bool strict) {
  if (!config.is_object()) {
    return invalid_argument(
        fmt::format("{}: expected a JSON object at the top level, found {}", source, describe_json(config)));
  }
  ConfigReader root(config, source);
  D0_ASSIGN_OR_RETURN(const FamilyInfo* info, detect_family(root));
  ModelSpec spec;
  spec.family = info->name();
  D0_ASSIGN_OR_RETURN(std::vector<std::string> architectures, root.optional_string_list("architectures"));
  spec.architecture = architectures.empty() ? info->architectures.front() : architectures.front();
  D0_ASSIGN_OR_RETURN(spec.model_type, root.optional_string("model_type", info->model_types.front()));

  const auto& wrappers = info->wrapper_architectures;
  const bool nested = !wrappers.empty() &&
                      (std::find(wrappers.begin(), wrappers.end(), spec.architecture) != wrappers.end() ||
                       root.present("text_config"));
  if (nested) {
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> text, root.optional_object("text_config"));
    if (!text) return root.mismatch("text_config", "an object with the text model's keys");
    // The wrapper builds whatever text model_type text_config names: it must be this family's.
    D0_ASSIGN_OR_RETURN(std::string text_type, text->optional_string("model_type", info->name()));
    const auto& types = info->model_types;
    if (std::find(types.begin(), types.end(), text_type) == types.end()) {
      return unsupported(
          fmt::format("{}: text_config.model_type: \"{}\" is not supported inside {} (Day0 reads "
                      "its text model as {})",
                      source, text_type, spec.architecture, fmt::join(types, ", ")));
    }
    spec.multimodal_wrapper = true;
    const nlohmann::json merged = text_config_of(config);
    const ConfigReader cfg = root.derived(merged, "text_config");
    D0_RETURN_IF_ERROR(info->parse(cfg, spec));
    // The parser read the wrapper's quantization_config under text_config's path: account for the
    // wrapper's keys, and refuse a text_config copy that says something else (Kimi K2.5 ships both).
    if (config.contains("quantization_config")) {
      const auto& inner = config["text_config"];
      if (inner.contains("quantization_config") &&
          inner["quantization_config"] != config["quantization_config"]) {
        return unsupported(
            fmt::format("{}: text_config.quantization_config differs from quantization_config, "
                        "which transformers applies to the whole wrapper",
                        source));
      }
      const std::string inside = "text_config.";
      for (const std::string& used : std::set<std::string>(root.used_keys())) {
        if (used.starts_with(inside + "quantization_config")) root.mark_used(used.substr(inside.size()));
      }
    }
    // The top-level keys the text model takes (merged above), and the vision tower's, which a
    // text-only spec does not use.
    for (const char* key : {"torch_dtype", "dtype", "quantization_config", "tie_word_embeddings",
                            "boi_token_index", "eoi_token_index", "image_token_index"}) {
      root.mark_used(key);
    }
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> vision, root.optional_object("vision_config"));
    if (vision) mark_subtree_used(*vision);
    // The wrapper builds its text model from text_config's model_type; the class named there is unused.
    text->mark_used("architectures");
    // Kimi K2.5's image / video placeholders and projector, as transformers and the release's remote code
    // spell them. Day0 takes token ids only; transformers embeds a placeholder id as token 0 when no
    // pixels come with it (a text-only run here embeds the id itself).
    for (const char* key :
         {"image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
          "projection_hidden_size", "projection_layer_norm_eps", "media_placeholder_token_id",
          "video_placeholder", "use_unified_vision_chunk", "ignore_index"}) {
      root.mark_used(key);
    }
    // Other wrappers' spellings of the same: placeholder indices, the projector's width and the vision
    // tower's patch merge repeated at the top level.
    for (const char* key : {"video_token_index", "projector_hidden_size", "merged_hidden_size",
                            "image_token_compression_method", "spatial_merge_size", "temporal_patch_size",
                            "image_seq_length"}) {
      root.mark_used(key);
    }
    // Gemma 4's: begin / end of image and audio markers, the audio placeholder and its audio tower.
    for (const char* key :
         {"boi_token_id", "eoi_token_id", "boa_token_id", "eoa_token_index", "audio_token_id"})
      root.mark_used(key);
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> audio, root.optional_object("audio_config"));
    if (audio) mark_subtree_used(*audio);
    root.mark_used("audio_config");

  } else {
    D0_RETURN_IF_ERROR(info->parse(root, spec));
  }
  if (spec.weights.format == WeightFormat::kMxfp4 && !info->mxfp4_experts) {
    return unsupported(
        fmt::format("{}: quantization_config.quant_method: mxfp4 is not defined for {} checkpoints "
                    "(families with MXFP4 experts: {})",
                    source, spec.family, mxfp4_families()));
  }
  spec.attention_scale = derive_attention_scale(spec);
  D0_RETURN_IF_ERROR(validate_model_spec(spec).with_context(source));
  ConfigAudit found;
  collect_unknown(config, "", root.used_keys(), found.unknown_keys);
  if (strict && !found.unknown_keys.empty()) {
    return unsupported(fmt::format(
        "{}: {}: unknown field \u2014 may change the math; --strict-config refuses "
        "it ({} unknown field(s) in all: {})",
        source, found.unknown_keys.front(), found.unknown_keys.size(), fmt::join(found.unknown_keys, ", ")));
  }
  if (audit != nullptr) *audit = std::move(found);
  return spec;
}

Result<ModelSpec> parse_model_config_text(std::string_view text, const std::string& source,
                                          ConfigAudit* audit, bool strict) {
  D0_ASSIGN_OR_RETURN(nlohmann::json config, parse_json_text(text, source, kConfigJsonLimits));
  return parse_model_config(config, source, audit, strict);
}

Result<ModelSpec> load_model_config(const std::filesystem::path& path, ConfigAudit* audit, bool strict) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found(fmt::format("{}: no such file", path.string()));
  if (std::filesystem::is_directory(path, ec)) {
    return invalid_argument(fmt::format("{}: is a directory, expected a config.json file", path.string()));
  }
  D0_ASSIGN_OR_RETURN(std::string text, read_bounded_file(path, kConfigJsonLimits.max_bytes));
  // ModelOpt exports may keep their scheme beside config.json only, in hf_quant_config.json's
  // "quantization" object: read as config.json's quantization_config with quant_method "modelopt".
  const std::filesystem::path hf_quant = path.parent_path() / "hf_quant_config.json";
  if (std::filesystem::exists(hf_quant, ec)) {
    D0_ASSIGN_OR_RETURN(nlohmann::json config, parse_json_text(text, path.string(), kConfigJsonLimits));
    if (config.is_object() && !config.contains("quantization_config")) {
      D0_ASSIGN_OR_RETURN(std::string hf_text, read_bounded_file(hf_quant, kConfigJsonLimits.max_bytes));
      D0_ASSIGN_OR_RETURN(nlohmann::json hf, parse_json_text(hf_text, hf_quant.string(), kConfigJsonLimits));
      if (!hf.is_object() || !hf.contains("quantization") || !hf["quantization"].is_object()) {
        return invalid_argument(fmt::format(
            "{}: quantization: expected an object (ModelOpt's scheme), found {}", hf_quant.string(),
            hf.is_object() && hf.contains("quantization") ? describe_json(hf["quantization"])
                                                          : std::string("none")));
      }
      nlohmann::json quant = hf["quantization"];
      quant["quant_method"] = "modelopt";
      if (hf.contains("producer")) quant["producer"] = hf["producer"];
      config["quantization_config"] = std::move(quant);
      return parse_model_config(config, path.string() + " (with hf_quant_config.json)", audit, strict);
    }
  }
  return parse_model_config_text(text, path.string(), audit, strict);
}

}  // namespace day0
