#include "day0/tokenizer/file_io.h"

#include <zlib.h>
#include <algorithm>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "day0/core/json_reader.h"

namespace day0::tokenizer {
namespace {

Result<std::string> read_gzip(const std::filesystem::path& path) {
  // The compressed file must be a regular file of bounded size, and inflation stops at the same cap:
  // a gzip bomb (a few MB inflating to GBs) is bad input, not an out-of-memory kill.
  D0_RETURN_IF_ERROR(check_regular_file(path, kMaxTokenizerFileBytes));
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
    if (out.size() + static_cast<size_t>(n) > kMaxTokenizerFileBytes) {
      gzclose(f);
      return out_of_range(fmt::format("{}: inflates to more than {} bytes (the limit for a tokenizer file)",
                                      path.string(), kMaxTokenizerFileBytes));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  gzclose(f);
  return out;
}

}  // namespace

Result<std::string> read_text_file(const std::filesystem::path& path) {
  if (path.extension() == ".gz") return read_gzip(path);
  return read_bounded_file(path, kMaxTokenizerFileBytes);
}

}  // namespace day0::tokenizer
