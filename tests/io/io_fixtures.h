#pragma once
// Helpers for io tests: raw safetensors bytes built by hand (to corrupt them at will) and temp dirs.
#include <cstdint>
#include <string>
#include <vector>

namespace day0::testing {

// 8-byte little-endian length + `header_json` (unpadded) + `data`.
std::vector<uint8_t> raw_safetensors(const std::string& header_json, const std::vector<uint8_t>& data);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_file(const std::string& path);

// A fresh directory removed (recursively) when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace day0::testing
