#pragma once
// Broken invariants (bugs, not bad input) throw InternalError with the file and line. Callers at the
// process edge (CLI main, server request loop) catch it, report it and exit 3 / fail the request.
#include <stdexcept>
#include <string>

namespace day0 {

class InternalError : public std::logic_error {
 public:
  InternalError(const std::string& what, const char* file, int line);
};

[[noreturn]] void fail_check(const char* condition, const std::string& message, const char* file, int line);

}  // namespace day0

#define D0_CHECK(cond)                                                         \
  do {                                                                         \
    if (!(cond)) ::day0::fail_check(#cond, std::string(), __FILE__, __LINE__); \
  } while (0)
#define D0_CHECK_MSG(cond, msg)                                        \
  do {                                                                 \
    if (!(cond)) ::day0::fail_check(#cond, (msg), __FILE__, __LINE__); \
  } while (0)
