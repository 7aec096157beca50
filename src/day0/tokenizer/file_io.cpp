#include "day0/tokenizer/file_io.h"

#include <zlib.h>
#include <algorithm>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace day0::tokenizer {
namespace {

Result<std::string> read_gzip(const std::filesystem::path& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return io_error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      return data_loss(fmt::format("{}: corrupt gzip data: {}", path.string(), msg));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  gzclose(f);
  return out;
}

}  // namespace

Result<std::string> read_text_file(const std::filesystem::path& path) {
  if (path.extension() == ".gz") return read_gzip(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("{}: read failed", path.string()));
  return std::move(ss).str();
}

}  // namespace day0::tokenizer
