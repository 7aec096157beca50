// The parsers of spot-check files (prompt sets and reference continuations: outside input, fuzzed by
// fuzz/spot_reference_fuzz.cpp) and the greedy comparison; no engine here.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "day0/core/json_reader.h"
#include "day0/report/spot_check.h"

namespace day0::report {
namespace {

// Spot-check files are small: a few prompts and their continuations.
constexpr JsonLimits kSpotJsonLimits{size_t{16} << 20, 16};
constexpr size_t kMaxPromptIds = size_t{1} << 16;

using Json = nlohmann::ordered_json;

Result<std::string> string_field(const Json& object, const char* key, const std::string& where) {
  if (!object.contains(key) || !object[key].is_string())
    return invalid_argument(fmt::format("{}: \"{}\": expected a string", where, key));
  return object[key].get<std::string>();
}

Result<int64_t> int_field(const Json& object, const char* key, int64_t lo, int64_t hi,
                          const std::string& where) {
  if (!object.contains(key) || !object[key].is_number_integer())
    return invalid_argument(fmt::format("{}: \"{}\": expected an integer", where, key));
  const auto value = object[key].get<int64_t>();
  if (value < lo || value > hi)
    return out_of_range(fmt::format("{}: \"{}\": expected {}..{}, found {}", where, key, lo, hi, value));
  return value;
}

Result<std::vector<int32_t>> ids_field(const Json& object, const char* key, size_t max_count,
                                       int64_t vocab_size, const std::string& where) {
  if (!object.contains(key) || !object[key].is_array())
    return invalid_argument(fmt::format("{}: \"{}\": expected an array of token ids", where, key));
  const auto& array = object[key];
  if (array.size() > max_count)
    return out_of_range(
        fmt::format("{}: \"{}\": at most {} ids, found {}", where, key, max_count, array.size()));
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const auto& v = array[i];
    const int64_t hi = vocab_size > 0 ? vocab_size - 1 : INT32_MAX;
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > hi) {
      return out_of_range(fmt::format("{}: \"{}\"[{}]: expected a token id in 0..{}, found {}", where, key, i,
                                      hi, json_excerpt(v)));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

Result<SpotPrompt> parse_prompt(const Json& item, const std::string& where) {
  if (!item.is_object()) return invalid_argument(where + ": expected an object");
  SpotPrompt prompt;
  D0_ASSIGN_OR_RETURN(prompt.id, string_field(item, "id", where));
  D0_ASSIGN_OR_RETURN(prompt.kind, string_field(item, "kind", where));
  D0_ASSIGN_OR_RETURN(prompt.max_new_tokens, int_field(item, "max_new_tokens", 1, kMaxSpotNewTokens, where));
  if (!item.contains("messages") || !item["messages"].is_array() || item["messages"].empty())
    return invalid_argument(where + ": \"messages\": expected a non-empty array of {role, content}");
  for (size_t i = 0; i < item["messages"].size(); ++i) {
    const auto& m = item["messages"][i];
    const std::string at = fmt::format("{}.messages[{}]", where, i);
    D0_RETURN_IF_ERROR(string_field(m, "role", at).status());
    D0_RETURN_IF_ERROR(string_field(m, "content", at).status());
  }
  prompt.messages = item["messages"];
  return prompt;
}

// Checks the format key and returns the "prompts" array of a spot-check document.
Result<const Json*> prompts_array(const Json& doc, const char* format, const std::string& where) {
  if (!doc.is_object()) return invalid_argument(where + ": expected a JSON object");
  D0_ASSIGN_OR_RETURN(std::string found, string_field(doc, "format", where));
  if (found != format)
    return invalid_argument(
        fmt::format("{}: \"format\": expected \"{}\", found \"{}\"", where, format, found));
  if (!doc.contains("prompts") || !doc["prompts"].is_array() || doc["prompts"].empty())
    return invalid_argument(where + ": \"prompts\": expected a non-empty array");
  if (doc["prompts"].size() > static_cast<size_t>(kMaxSpotPrompts)) {
    return out_of_range(fmt::format("{}: \"prompts\": at most {} prompts, found {}", where, kMaxSpotPrompts,
                                    doc["prompts"].size()));
  }
  return &doc["prompts"];
}

Status check_unique_ids(const std::vector<std::string>& ids, const std::string& where) {
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (auto [it, inserted] = seen.emplace(ids[i], i); !inserted)
      return invalid_argument(
          fmt::format("{}: prompts[{}]: id \"{}\" repeats prompts[{}]", where, i, ids[i], it->second));
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<SpotPrompt>> parse_spot_prompts(std::string_view text, const std::string& where) {
  D0_ASSIGN_OR_RETURN(Json doc, parse_ordered_json_text(text, where, kSpotJsonLimits));
  D0_ASSIGN_OR_RETURN(const Json* array, prompts_array(doc, kSpotPromptsFormat, where));
  std::vector<SpotPrompt> prompts;
  std::vector<std::string> ids;
  for (size_t i = 0; i < array->size(); ++i) {
    D0_ASSIGN_OR_RETURN(SpotPrompt p, parse_prompt((*array)[i], fmt::format("{}: prompts[{}]", where, i)));
    ids.push_back(p.id);
    prompts.push_back(std::move(p));
  }
  D0_RETURN_IF_ERROR(check_unique_ids(ids, where));
  return prompts;
}

Result<SpotReference> parse_spot_reference(std::string_view text, const std::string& where,
                                           int64_t vocab_size) {
  D0_ASSIGN_OR_RETURN(Json doc, parse_ordered_json_text(text, where, kSpotJsonLimits));
  D0_ASSIGN_OR_RETURN(const Json* array, prompts_array(doc, kSpotReferenceFormat, where));
  SpotReference ref;
  D0_ASSIGN_OR_RETURN(ref.producer, string_field(doc, "producer", where));
  D0_ASSIGN_OR_RETURN(ref.version, string_field(doc, "version", where));
  D0_ASSIGN_OR_RETURN(ref.dtype, string_field(doc, "dtype", where));
  std::vector<std::string> ids;
  for (size_t i = 0; i < array->size(); ++i) {
    const std::string at = fmt::format("{}: prompts[{}]", where, i);
    const Json& item = (*array)[i];
    SpotReferenceEntry entry;
    D0_ASSIGN_OR_RETURN(entry.prompt, parse_prompt(item, at));
    D0_ASSIGN_OR_RETURN(entry.prompt_ids, ids_field(item, "prompt_ids", kMaxPromptIds, vocab_size, at));
    if (entry.prompt_ids.empty()) return invalid_argument(at + ": \"prompt_ids\": expected at least one id");
    D0_ASSIGN_OR_RETURN(
        entry.greedy_ids,
        ids_field(item, "greedy_ids", static_cast<size_t>(entry.prompt.max_new_tokens), vocab_size, at));
    D0_ASSIGN_OR_RETURN(entry.greedy_text, string_field(item, "greedy_text", at));
    ids.push_back(entry.prompt.id);
    ref.entries.push_back(std::move(entry));
  }
  D0_RETURN_IF_ERROR(check_unique_ids(ids, where));
  return ref;
}

Result<SpotReference> read_spot_reference(const std::filesystem::path& path, int64_t vocab_size) {
  D0_ASSIGN_OR_RETURN(std::string text, read_bounded_file(path, kSpotJsonLimits.max_bytes));
  return parse_spot_reference(text, path.string(), vocab_size);
}

GreedyComparison compare_greedy(std::span<const int32_t> ours, std::span<const int32_t> reference) {
  GreedyComparison c;
  c.reference_tokens = static_cast<int64_t>(reference.size());
  c.compared = static_cast<int64_t>(std::min(ours.size(), reference.size()));
  int64_t equal = 0;
  for (int64_t i = 0; i < c.compared; ++i) {
    if (ours[static_cast<size_t>(i)] == reference[static_cast<size_t>(i)]) {
      ++equal;
    } else if (c.first_divergence < 0) {
      c.first_divergence = i;
    }
  }
  if (c.first_divergence < 0 && ours.size() != reference.size()) c.first_divergence = c.compared;
  const auto longest = static_cast<double>(std::max(ours.size(), reference.size()));
  c.token_agreement = longest > 0 ? static_cast<double>(equal) / longest : 1.0;
  const int64_t prefix = c.first_divergence < 0 ? c.reference_tokens : c.first_divergence;
  c.prefix_agreement =
      c.reference_tokens > 0
          ? std::min(1.0, static_cast<double>(prefix) / static_cast<double>(c.reference_tokens))
          : (ours.empty() ? 1.0 : 0.0);
  return c;
}

bool degenerate_output(std::span<const int32_t> ids) {
  if (ids.size() < 16) return false;
  std::unordered_map<int32_t, size_t> counts;
  size_t most = 0;
  for (int32_t id : ids) most = std::max(most, ++counts[id]);
  return most * 4 > ids.size() * 3;
}

}  // namespace day0::report
