#pragma once
// Human-readable numbers for tables: 671.03 B parameters, 1.25 TB, 70.27 kB.
#include <cstdint>
#include <string>

namespace day0 {

// Decimal magnitude with a suffix: 1234 -> "1.23 K", 6.71e11 -> "671.03 B" (billions), 1e12 -> "1.00 T".
std::string human_count(double value);
// Decimal bytes: "12.00 TB", "70.27 kB", "512 B".
std::string human_bytes(double bytes);
// Binary bytes: "4.77 MiB".
std::string human_bytes_binary(double bytes);
// Integer with thousands separators: 1026408232448 -> "1,026,408,232,448".
std::string with_commas(int64_t value);
// Seconds in the unit that reads best: "850 us", "12.3 ms", "4.20 s", "3 min 12 s".
std::string human_seconds(double seconds);

}  // namespace day0
