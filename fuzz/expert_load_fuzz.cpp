// libFuzzer target: expert-load files (run / serve --expert-load FILE) and the redundant-expert
// placement they drive.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "day0/dist/expert_load.h"
#include "day0/dist/expert_placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto load = day0::dist::parse_expert_load(text, "fuzz/load.json");
  if (!load.is_ok() || load->n_experts > 4096) return 0;
  // Place a few copies over two and three ranks by the parsed counts: every expert keeps a holder,
  // and no rank holds one expert twice.
  for (const auto& [layer, picks] : load->layers) {
    const std::vector<double> weights(picks.begin(), picks.end());
    for (int64_t ep : {2, 3}) {
      if (load->n_experts < ep) continue;
      const int64_t redundant = std::min<int64_t>(load->n_experts * (ep - 1), 5);
      if (!day0::dist::check_redundant_experts(load->n_experts, ep, redundant).is_ok()) __builtin_trap();
      const auto p = day0::dist::place_layer_experts(load->n_experts, ep, redundant, weights);
      int64_t slots = 0;
      for (const auto& held : p.held) {
        slots += static_cast<int64_t>(held.size());
        std::vector<char> seen(static_cast<size_t>(load->n_experts), 0);
        for (int32_t e : held) {
          if (e < 0 || e >= load->n_experts || seen[static_cast<size_t>(e)]) __builtin_trap();
          seen[static_cast<size_t>(e)] = 1;
        }
      }
      if (slots != load->n_experts + redundant) __builtin_trap();
    }
    break;  // one layer is enough per input
  }
  return 0;
}
