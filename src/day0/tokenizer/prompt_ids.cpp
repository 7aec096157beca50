#include "day0/tokenizer/prompt_ids.h"

#include <charconv>

#include <fmt/format.h>

namespace day0 {

Result<std::vector<std::vector<int64_t>>> parse_prompt_ids(std::string_view text, int64_t vocab) {
  std::vector<std::vector<int64_t>> prompts(1);
  size_t i = 0;
  while (i <= text.size()) {
    const size_t end = text.find_first_of(",;", i);
    const std::string_view item =
        text.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
    int64_t v = -1;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size()) {
      return invalid_argument(
          fmt::format("--prompt-ids: \"{}\" is not a token id (expected e.g. 1,2,3 or 1,2;3,4)", item));
    }
    if (v < 0 || (vocab > 0 && v >= vocab)) {
      return invalid_argument(
          fmt::format("--prompt-ids: token id {} outside the vocabulary [0, {})", v, vocab));
    }
    prompts.back().push_back(v);
    if (end == std::string_view::npos) break;
    if (text[end] == ';') prompts.emplace_back();
    i = end + 1;
  }
  return prompts;
}

std::vector<std::vector<int64_t>> seeded_prompts(int64_t count, int64_t length, int64_t vocab,
                                                 uint64_t seed) {
  std::vector<std::vector<int64_t>> out;
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t p = 0; p < count; ++p) {
    std::vector<int64_t> ids;
    for (int64_t t = 0; t < length + p; ++t) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      ids.push_back(static_cast<int64_t>(state % static_cast<uint64_t>(vocab)));
    }
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace day0
