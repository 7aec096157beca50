#include "day0/core/status.h"

#include "day0/core/error.h"

namespace day0 {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kParseError:
      return "parse error";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kOutOfRange:
      return "out of range";
    case StatusCode::kDataLoss:
      return "data loss";
    case StatusCode::kFailedPrecondition:
      return "failed precondition";
    case StatusCode::kResourceExhausted:
      return "resource exhausted";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_);
}

void throw_bad_result_access(const Status& status) {
  throw InternalError("value() of a failed Result: " + status.to_string(), __FILE__, __LINE__);
}

InternalError::InternalError(const std::string& what, const char* file, int line)
    : std::logic_error(std::string(file) + ":" + std::to_string(line) + ": " + what) {}

void fail_check(const char* condition, const std::string& message, const char* file, int line) {
  std::string what = std::string("check failed: ") + condition;
  if (!message.empty()) what += " (" + message + ")";
  throw InternalError(what, file, line);
}

}  // namespace day0
