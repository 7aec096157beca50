#pragma once
// Recoverable failures travel as Status / Result<T> with context (file, key path, tensor, expected vs
// found). Broken invariants throw InternalError (see error.h) instead.
#include <string>
#include <utility>
#include <variant>

namespace day0 {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad user input: a flag, a config field, a request
  kNotFound,            // a file, tensor or model name that does not exist
  kIoError,             // the OS refused: open, read, mmap, write
  kParseError,          // malformed JSON / safetensors header / template
  kUnsupported,         // understood but not (yet) supported: a family, an op, a dtype
  kOutOfRange,          // a size or offset past a bound, an overflow
  kDataLoss,            // truncated or corrupted data, hash mismatch
  kFailedPrecondition,  // state does not allow it (e.g. model does not fit)
  kResourceExhausted,   // out of memory, too large to plan
  kInternal,            // an invariant broke; reported, never aborts
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: config.json: num_attention_heads: expected a positive integer, found -3"
  std::string to_string() const;
  // Prefix context, e.g. the file: st.with_context("model/config.json").
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string msg) {
  return {StatusCode::kInvalidArgument, std::move(msg)};
}
inline Status not_found(std::string msg) {
  return {StatusCode::kNotFound, std::move(msg)};
}
inline Status io_error(std::string msg) {
  return {StatusCode::kIoError, std::move(msg)};
}
inline Status parse_error(std::string msg) {
  return {StatusCode::kParseError, std::move(msg)};
}
inline Status unsupported(std::string msg) {
  return {StatusCode::kUnsupported, std::move(msg)};
}
inline Status out_of_range(std::string msg) {
  return {StatusCode::kOutOfRange, std::move(msg)};
}
inline Status data_loss(std::string msg) {
  return {StatusCode::kDataLoss, std::move(msg)};
}
inline Status failed_precondition(std::string msg) {
  return {StatusCode::kFailedPrecondition, std::move(msg)};
}
inline Status resource_exhausted(std::string msg) {
  return {StatusCode::kResourceExhausted, std::move(msg)};
}
inline Status internal_error(std::string msg) {
  return {StatusCode::kInternal, std::move(msg)};
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(data_).is_ok()) {
      data_ = Status(StatusCode::kInternal, "Result constructed from an OK status without a value");
    }
  }

  bool is_ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(data_);
  }
  // Accessing the value of a failed Result is a programming error: it throws InternalError.
  T& value() &;
  const T& value() const&;
  T&& value() &&;
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

[[noreturn]] void throw_bad_result_access(const Status& status);

template <typename T>
T& Result<T>::value() & {
  if (!is_ok()) throw_bad_result_access(std::get<Status>(data_));
  return std::get<T>(data_);
}
template <typename T>
const T& Result<T>::value() const& {
  if (!is_ok()) throw_bad_result_access(std::get<Status>(data_));
  return std::get<T>(data_);
}
template <typename T>
T&& Result<T>::value() && {
  if (!is_ok()) throw_bad_result_access(std::get<Status>(data_));
  return std::move(std::get<T>(data_));
}

}  // namespace day0

// Early-return helpers. D0_ASSIGN_OR_RETURN(auto x, expr) declares x from a Result.
#define D0_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::day0::Status d0_status_ = (expr);         \
    if (!d0_status_.is_ok()) return d0_status_; \
  } while (0)

#define D0_CONCAT_INNER(a, b) a##b
#define D0_CONCAT(a, b) D0_CONCAT_INNER(a, b)
#define D0_ASSIGN_OR_RETURN(lhs, expr) D0_ASSIGN_OR_RETURN_IMPL(D0_CONCAT(d0_result_, __LINE__), lhs, expr)
#define D0_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
