#include "day0/model/family_registry.h"

#include <fmt/format.h>
#include <algorithm>
#include <cctype>

#include "day0/core/error.h"
#include "day0/model/families/families.h"

namespace day0 {

const std::vector<FamilyInfo>& family_registry() {
  namespace f = families;
  static const std::vector<FamilyInfo> kRegistry = {
      {Family::kLlama, {"llama"}, {"LlamaForCausalLM"}, f::parse_llama, f::write_llama, f::weights_llama},
      {Family::kMistral,
       {"mistral"},
       {"MistralForCausalLM"},
       f::parse_mistral,
       f::write_mistral,
       f::weights_mistral},
      {Family::kQwen2, {"qwen2"}, {"Qwen2ForCausalLM"}, f::parse_qwen2, f::write_qwen2, f::weights_qwen2},
      {Family::kQwen3, {"qwen3"}, {"Qwen3ForCausalLM"}, f::parse_qwen3, f::write_qwen3, f::weights_qwen3},
      {Family::kMixtral,
       {"mixtral"},
       {"MixtralForCausalLM"},
       f::parse_mixtral,
       f::write_mixtral,
       f::weights_mixtral},
      {Family::kQwen2Moe,
       {"qwen2_moe"},
       {"Qwen2MoeForCausalLM"},
       f::parse_qwen2_moe,
       f::write_qwen2_moe,
       f::weights_qwen2_moe},
      {Family::kQwen3Moe,
       {"qwen3_moe"},
       {"Qwen3MoeForCausalLM"},
       f::parse_qwen3_moe,
       f::write_qwen3_moe,
       f::weights_qwen3_moe},
      {Family::kDeepseekV2,
       {"deepseek_v2"},
       {"DeepseekV2ForCausalLM"},
       f::parse_deepseek_v2,
       f::write_deepseek_v2,
       f::weights_deepseek_v2},
      {Family::kDeepseekV3,
       {"deepseek_v3", "kimi_k2"},
       {"DeepseekV3ForCausalLM"},
       f::parse_deepseek_v3,
       f::write_deepseek_v3,
       f::weights_deepseek_v3},
      {Family::kGlm4Moe,
       {"glm4_moe"},
       {"Glm4MoeForCausalLM"},
       f::parse_glm4_moe,
       f::write_glm4_moe,
       f::weights_glm4_moe},
      {Family::kGptOss,
       {"gpt_oss"},
       {"GptOssForCausalLM"},
       f::parse_gpt_oss,
       f::write_gpt_oss,
       f::weights_gpt_oss},
      {Family::kLlama4Text,
       {"llama4_text", "llama4"},
       {"Llama4ForCausalLM", "Llama4ForConditionalGeneration"},
       f::parse_llama4_text,
       f::write_llama4_text,
       f::weights_llama4_text},
      {Family::kMinimaxM2,
       {"minimax_m2"},
       {"MiniMaxM2ForCausalLM"},
       f::parse_minimax_m2,
       f::write_minimax_m2,
       f::weights_minimax_m2},
      {Family::kLongcatFlash,
       {"longcat_flash"},
       {"LongcatFlashForCausalLM"},
       f::parse_longcat_flash,
       f::write_longcat_flash,
       f::weights_longcat_flash},
      {Family::kDeepseekV32,
       {"deepseek_v32"},
       {"DeepseekV32ForCausalLM"},
       f::parse_deepseek_v32,
       f::write_deepseek_v32,
       f::weights_deepseek_v32},
      {Family::kQwen3Next,
       {"qwen3_next"},
       {"Qwen3NextForCausalLM"},
       f::parse_qwen3_next,
       f::write_qwen3_next,
       f::weights_qwen3_next},
  };
  return kRegistry;
}

const FamilyInfo& family_info(Family family) {
  for (const auto& info : family_registry()) {
    if (info.family == family) return info;
  }
  D0_CHECK_MSG(false, fmt::format("family {} missing from the registry", static_cast<int>(family)));
  return family_registry().front();
}

std::string supported_families_text() {
  std::string out;
  for (const auto& info : family_registry()) {
    if (!out.empty()) out += ", ";
    out += family_name(info.family);
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

std::string nearest_name(std::string_view name) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& info : family_registry()) {
    for (const auto* names : {&info.architectures, &info.model_types}) {
      for (const auto& candidate : *names) {
        const size_t d = edit_distance(name, candidate);
        if (d < best_distance) {
          best_distance = d;
          best = candidate;
        }
      }
    }
  }
  return best;
}

Status unknown(const ConfigReader& cfg, std::string_view what, std::string_view name) {
  return unsupported(fmt::format("{}: {} \"{}\" is not supported; supported families: {}; nearest known: {}",
                                 cfg.source(), what, name, supported_families_text(), nearest_name(name)));
}

}  // namespace

Result<const FamilyInfo*> detect_family(const ConfigReader& cfg) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> architectures, cfg.optional_string_list("architectures"));
  D0_ASSIGN_OR_RETURN(std::string model_type, cfg.optional_string("model_type", ""));
  if (!architectures.empty()) {
    for (const auto& info : family_registry()) {
      for (const auto& arch : info.architectures) {
        if (arch == architectures.front()) return &info;
      }
    }
    return unknown(cfg, "architecture", architectures.front());
  }
  if (model_type.empty()) {
    return invalid_argument(
        fmt::format("{}: architectures / model_type: expected the model's architecture "
                    "(e.g. \"LlamaForCausalLM\") or model_type, found neither",
                    cfg.source()));
  }
  for (const auto& info : family_registry()) {
    for (const auto& type : info.model_types) {
      if (type == model_type) return &info;
    }
  }
  return unknown(cfg, "model_type", model_type);
}

}  // namespace day0
