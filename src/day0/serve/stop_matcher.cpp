#include "day0/serve/stop_matcher.h"

#include <algorithm>

namespace day0::serve {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return {};
  held_.append(piece);
  // The earliest stop string wins; the text before it is final.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail of `held_` that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t longest = std::min(s.size() - 1, held_.size());
    for (size_t n = longest; n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::finish() {
  if (stopped_) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace day0::serve
