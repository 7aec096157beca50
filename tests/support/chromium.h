#pragma once
// Headless Chromium for tests that look at an HTML page as a person would.
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace day0::testing {

inline std::string chromium_binary() {
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  return "";
}

inline std::string run_capture(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// Chromium's flags for a throwaway profile under `scratch`.
inline std::string chromium_flags(const std::filesystem::path& scratch) {
  return " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --user-data-dir=" +
         (scratch / "chromium-profile").string();
}

// The DOM after Chromium loaded and laid out `html`.
inline std::string chromium_dump_dom(const std::string& chromium, const std::filesystem::path& html,
                                     const std::filesystem::path& scratch) {
  return run_capture(chromium + chromium_flags(scratch) + " --dump-dom file://" + html.string() +
                     " 2>/dev/null");
}

// (stage id, verdict) of each checklist row of a rendered report, in order.
inline std::vector<std::pair<std::string, std::string>> rendered_checklist(const std::string& dom) {
  std::regex row("data-stage=\"([a-z]+)\" data-verdict=\"([a-z]+)\"");
  std::vector<std::pair<std::string, std::string>> rows;
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), row); it != std::sregex_iterator(); ++it) {
    rows.emplace_back((*it)[1], (*it)[2]);
  }
  return rows;
}

}  // namespace day0::testing
