// libFuzzer target: generation spot-check files (adapt --spot-reference, prompt sets).
#include <cstdint>
#include <string_view>

#include "day0/report/spot_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr int64_t kVocab = 1000;
  auto ref = day0::report::parse_spot_reference(text, "fuzz/spot.json", kVocab);
  if (ref.is_ok()) {
    for (const auto& e : ref->entries) {
      // Accepted files keep their promises: a prompt, a bounded continuation, ids inside the vocabulary.
      if (e.prompt_ids.empty() || static_cast<int64_t>(e.greedy_ids.size()) > e.prompt.max_new_tokens)
        __builtin_trap();
      for (int32_t id : e.greedy_ids)
        if (id < 0 || id >= kVocab) __builtin_trap();
      if (day0::report::compare_greedy(e.greedy_ids, e.greedy_ids).first_divergence != -1) __builtin_trap();
    }
  }
  (void)day0::report::parse_spot_prompts(text, "fuzz/prompts.json");
  return 0;
}
