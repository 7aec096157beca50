#include "day0/core/human.h"

#include <fmt/format.h>
#include <cmath>

namespace day0 {

namespace {
std::string scaled(double value, double base, const char* const* units, int n_units, bool integer_first) {
  int unit = 0;
  double v = value;
  while (std::fabs(v) >= base && unit + 1 < n_units) {
    v /= base;
    ++unit;
  }
  if (unit == 0 && integer_first) return fmt::format("{:.0f} {}", v, units[0]);
  return fmt::format("{:.2f} {}", v, units[unit]);
}
}  // namespace

std::string human_count(double value) {
  static const char* const kUnits[] = {"", "K", "M", "B", "T", "Q"};
  std::string s = scaled(value, 1000.0, kUnits, 6, true);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string human_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  return scaled(bytes, 1000.0, kUnits, 7, true);
}

std::string human_bytes_binary(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  return scaled(bytes, 1024.0, kUnits, 7, true);
}

std::string with_commas(int64_t value) {
  const unsigned long long magnitude = value < 0 ? static_cast<unsigned long long>(-(value + 1)) + 1ULL
                                                 : static_cast<unsigned long long>(value);
  const std::string digits = std::to_string(magnitude);
  std::string out;
  int count = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (count > 0 && count % 3 == 0) out.push_back(',');
    out.push_back(*it);
    ++count;
  }
  if (value < 0) out.push_back('-');
  return {out.rbegin(), out.rend()};
}

std::string human_seconds(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:.0f} us", seconds * 1e6);
  if (seconds < 1.0) return fmt::format("{:.1f} ms", seconds * 1e3);
  if (seconds < 120.0) return fmt::format("{:.2f} s", seconds);
  const auto minutes = static_cast<int64_t>(seconds / 60.0);
  return fmt::format("{} min {:.0f} s", minutes, seconds - 60.0 * static_cast<double>(minutes));
}

}  // namespace day0
