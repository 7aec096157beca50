#include "day0/core/json_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace day0 {
namespace {

// One open container while scanning: its kind and where we are inside it (for the key path).
struct Frame {
  bool is_object = false;
  bool expect_key = false;  // object: the next string is a key
  size_t index = 0;         // array: the current element
  std::string key;          // object: the current key (cut to kMaxKeyShown)
};

constexpr size_t kMaxKeyShown = 48;
constexpr size_t kMaxPathShown = 200;

std::string key_path(const std::vector<Frame>& stack) {
  std::string path;
  for (const Frame& f : stack) {
    if (f.is_object) {
      if (f.expect_key) break;  // between keys: the object itself is the place
      if (!path.empty()) path += '.';
      path += f.key;
    } else {
      path += fmt::format("[{}]", f.index);
    }
    if (path.size() > kMaxPathShown) {
      path.resize(kMaxPathShown);
      path += "...";
      break;
    }
  }
  return path.empty() ? std::string("(top level)") : path;
}

bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// Python's json module writes float('inf') as the bare tokens Infinity and -Infinity (transformers'
// Nemotron-H config: "time_step_limit": [0.0, Infinity]), which nlohmann refuses. Outside strings they
// become marker strings, turned back into the doubles they name once parsed.
constexpr std::string_view kInfinityMarker = "\\u0001day0:Infinity";
constexpr std::string_view kMinusInfinityMarker = "\\u0001day0:-Infinity";

// The text with bare Infinity / -Infinity replaced by the markers (quoted), or empty when it has none.
std::string with_infinity_markers(std::string_view text) {
  std::string out;
  size_t copied = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '"') {
      for (++i; i < text.size() && text[i] != '"'; i += text[i] == '\\' ? 2 : 1) {
      }
      continue;
    }
    const bool minus = text.substr(i, 9) == "-Infinity";
    if (!minus && text.substr(i, 8) != "Infinity") continue;
    out.append(text.substr(copied, i - copied));
    out += '"';
    out += minus ? kMinusInfinityMarker : kInfinityMarker;
    out += '"';
    i += minus ? 8 : 7;
    copied = i + 1;
  }
  if (copied == 0) return {};
  out.append(text.substr(copied));
  return out;
}

template <typename Json>
void restore_infinities(Json& v) {
  if (v.is_string()) {
    const std::string s = v.template get<std::string>();
    if (s == "\001day0:Infinity") v = std::numeric_limits<double>::infinity();
    if (s == "\001day0:-Infinity") v = -std::numeric_limits<double>::infinity();
    return;
  }
  if (v.is_array() || v.is_object()) {  // depth already bounded by check_json_text
    for (auto& e : v) restore_infinities(e);
  }
}

template <typename Json>
Result<Json> parse_with(std::string_view text, const std::string& source, const JsonLimits& limits) {
  D0_RETURN_IF_ERROR(check_json_text(text, source, limits));
  // Depth and number range are already checked, so what remains are syntax errors; parse without
  // exceptions and report nlohmann's message (which carries the byte position).
  try {
    const std::string marked = with_infinity_markers(text);
    if (marked.empty()) return Json::parse(text);
    Json out = Json::parse(marked);
    restore_infinities(out);
    return out;
  } catch (const nlohmann::json::exception& e) {
    return parse_error(fmt::format("{}: malformed JSON: {}", source, e.what()));
  }
}

template <typename Json>
std::string excerpt_of(const Json& value, size_t max_chars) {
  auto cut = [max_chars](std::string s) {
    if (s.size() > max_chars) s = s.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
    return s;
  };
  // Scalars are dumped directly (no recursion involved); containers show their scalar members only,
  // a nested container as [...] or {...}, so the cost is bounded by max_chars and not by depth.
  auto scalar = [](const Json& v) -> std::string {
    if (v.is_array()) return v.empty() ? "[]" : "[...]";
    if (v.is_object()) return v.empty() ? "{}" : "{...}";
    if (v.is_string()) {
      const auto& s = v.template get_ref<const typename Json::string_t&>();
      if (s.size() > 40)
        return Json(s.substr(0, 37) + "...").dump(-1, ' ', false, Json::error_handler_t::replace);
    }
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  if (!value.is_array() && !value.is_object()) return cut(scalar(value));
  std::string out = value.is_array() ? "[" : "{";
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (out.size() > max_chars) break;
    if (!first) out += ", ";
    first = false;
    if (value.is_object()) out += Json(it.key()).dump(-1, ' ', false, Json::error_handler_t::replace) + ": ";
    out += scalar(*it);
  }
  out += value.is_array() ? "]" : "}";
  return cut(out);
}

}  // namespace

Status check_json_text(std::string_view text, const std::string& source, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return out_of_range(fmt::format("{}: {} bytes of JSON, above the limit of {} bytes", source, text.size(),
                                    limits.max_bytes));
  }
  std::vector<Frame> stack;
  stack.reserve(static_cast<size_t>(limits.max_depth) + 1);
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '"') {
      // A string: find its end, honouring escapes. Keep it as the key when an object expects one.
      const size_t start = ++i;
      while (i < n && text[i] != '"') i += (text[i] == '\\') ? 2 : 1;
      if (!stack.empty() && stack.back().is_object && stack.back().expect_key) {
        Frame& f = stack.back();
        f.key.assign(text.substr(start, std::min(i, n) - start).substr(0, kMaxKeyShown));
        f.expect_key = false;
      }
      ++i;
      continue;
    }
    if (c == '{' || c == '[') {
      if (static_cast<int>(stack.size()) >= limits.max_depth) {
        return invalid_argument(fmt::format("{}: {}: nesting deeper than {} levels (objects and arrays)",
                                            source, key_path(stack), limits.max_depth));
      }
      stack.push_back(Frame{c == '{', c == '{', 0, {}});
    } else if (c == '}' || c == ']') {
      if (!stack.empty()) stack.pop_back();
    } else if (c == ',') {
      if (!stack.empty()) {
        if (stack.back().is_object) {
          stack.back().expect_key = true;
        } else {
          ++stack.back().index;
        }
      }
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = i;
      while (i < n && is_number_char(text[i])) ++i;
      const std::string token(text.substr(start, i - start));
      errno = 0;
      const double v = std::strtod(token.c_str(), nullptr);
      if (std::isinf(v)) {
        const std::string shown = token.size() > 40 ? token.substr(0, 37) + "..." : token;
        return invalid_argument(fmt::format("{}: {}: number {} is out of range (beyond ±1.8e308)", source,
                                            key_path(stack), shown));
      }
      continue;
    }
    ++i;
  }
  return Status::ok();
}

Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& source,
                                       const JsonLimits& limits) {
  return parse_with<nlohmann::json>(text, source, limits);
}

Result<nlohmann::ordered_json> parse_ordered_json_text(std::string_view text, const std::string& source,
                                                       const JsonLimits& limits) {
  return parse_with<nlohmann::ordered_json>(text, source, limits);
}

Status check_regular_file(const std::filesystem::path& path, size_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found(fmt::format("{}: no such file", path.string()));
    return io_error(fmt::format("{}: cannot stat: {}", path.string(), std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode))
    return invalid_argument(fmt::format("{}: is a directory, expected a file", path.string()));
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument(fmt::format("{}: not a regular file (a device, FIFO or socket)", path.string()));
  }
  if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
    return out_of_range(fmt::format("{}: {} bytes, above the limit of {} bytes for this kind of file",
                                    path.string(), static_cast<long long>(st.st_size), max_bytes));
  }
  return Status::ok();
}

Result<std::string> read_bounded_file(const std::filesystem::path& path, size_t max_bytes) {
  const std::string name = path.string();
  // O_NONBLOCK so that opening a FIFO does not wait for a writer; fstat on the opened descriptor so
  // that the checked file is the read file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(fmt::format("{}: no such file", name));
    return io_error(fmt::format("{}: cannot open: {}", name, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(fmt::format("{}: cannot stat: {}", name, std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return invalid_argument(fmt::format("{}: is a directory, expected a file", name));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(fmt::format("{}: not a regular file (a device, FIFO or socket)", name));
  }
  if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
    ::close(fd);
    return out_of_range(fmt::format("{}: {} bytes, above the limit of {} bytes for this kind of file", name,
                                    static_cast<long long>(st.st_size), max_bytes));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t got = ::read(fd, out.data() + done, out.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      return io_error(fmt::format("{}: read failed: {}", name, std::strerror(err)));
    }
    if (got == 0) break;  // shrank while reading: take what is there
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

Result<nlohmann::json> read_json_file(const std::filesystem::path& path, const JsonLimits& limits) {
  D0_ASSIGN_OR_RETURN(std::string text, read_bounded_file(path, limits.max_bytes));
  return parse_json_text(text, path.string(), limits);
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  return excerpt_of(value, max_chars);
}
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars) {
  return excerpt_of(value, max_chars);
}

}  // namespace day0
