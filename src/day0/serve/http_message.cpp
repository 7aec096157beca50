#include "day0/serve/http_message.h"

#include <algorithm>

#include <fmt/format.h>

namespace day0::serve {

namespace {

constexpr size_t kMaxRequestLine = 8 * 1024;  // 414 above
constexpr size_t kMaxChunkLine = 4 * 1024;    // a chunk-size line with its extensions
constexpr size_t kMaxHexDigits = 15;          // a chunk size that fits in 60 bits

// RFC 9110 token characters (field names, methods, codings).
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

// Field values: visible characters, obs-text, space and tab; no other control character.
bool is_field_value(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return c == '\t' || (u >= 0x20 && u != 0x7f);
  });
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// A comma-separated list's elements, trimmed; false when an element is empty ("a,,b", "a,").
bool split_list(std::string_view value, std::vector<std::string>& out) {
  while (true) {
    const size_t comma = value.find(',');
    const std::string_view element = trim_ows(value.substr(0, comma));
    if (element.empty()) return false;
    out.emplace_back(element);
    if (comma == std::string_view::npos) return true;
    value.remove_prefix(comma + 1);
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

enum class Line { kFound, kNeedMore, kBareCr, kBareLf, kTooLong };

// Finds the CRLF ending the line that starts at `from`, scanning on from `scanned` (bytes before it
// were looked at by an earlier call). `cr`: the index of the CR.
Line scan_line(std::string_view buffer, size_t from, size_t max_line, size_t& scanned, size_t& cr) {
  size_t i = std::max(scanned, from);
  for (; i < buffer.size(); ++i) {
    const char c = buffer[i];
    const bool after_cr = i > from && buffer[i - 1] == '\r';
    if (c == '\n') {
      if (!after_cr) return Line::kBareLf;
      cr = i - 1;
      scanned = i + 1;
      return Line::kFound;
    }
    if (after_cr) return Line::kBareCr;
    if (i - from >= max_line) return Line::kTooLong;
  }
  scanned = i;
  return Line::kNeedMore;
}

}  // namespace

std::string_view HttpRequest::field(std::string_view name) const {
  for (const auto& [n, v] : fields)
    if (n == name) return v;
  return {};
}

void HttpRequestParser::reset() {
  request_ = HttpRequest{};
  error_ = HttpError{};
  phase_ = Phase::kHead;
  pos_ = scanned_ = remaining_ = trailer_bytes_ = 0;
  started_ = false;
}

HttpRequestParser::State HttpRequestParser::fail(int status, std::string message) {
  phase_ = Phase::kFailed;
  error_ = HttpError{status, std::move(message)};
  return State::kError;
}

HttpRequestParser::State HttpRequestParser::parse(std::string_view buffer) {
  switch (phase_) {
    case Phase::kFailed:
      return State::kError;
    case Phase::kDone:
      return State::kComplete;
    case Phase::kHead:
      break;
    case Phase::kBodyLength:
      if (buffer.size() - pos_ < remaining_) return State::kNeedMore;
      request_.body.assign(buffer.substr(pos_, remaining_));
      pos_ += remaining_;
      remaining_ = 0;
      phase_ = Phase::kDone;
      return State::kComplete;
    default:
      return parse_chunked(buffer);
  }
  // Empty lines before a request line are skipped (RFC 9112 section 2.2), within the head's limit.
  while (!started_ && pos_ < buffer.size()) {
    if (buffer[pos_] == '\n') return fail(400, "a bare LF ends a line (HTTP lines end with CRLF)");
    if (buffer[pos_] != '\r') {
      started_ = true;
      scanned_ = pos_;
      break;
    }
    if (pos_ + 1 >= buffer.size()) return State::kNeedMore;
    if (buffer[pos_ + 1] != '\n') return fail(400, "a bare CR in the request head");
    pos_ += 2;
    if (pos_ > limits_.max_head_bytes) return fail(400, "too many empty lines before the request line");
  }
  if (!started_) return State::kNeedMore;
  // The head ends at the first empty line; each byte is scanned once across calls.
  size_t end = std::string_view::npos;
  size_t i = std::max(scanned_, pos_);
  for (; i < buffer.size(); ++i) {
    const char c = buffer[i];
    const bool after_cr = i > pos_ && buffer[i - 1] == '\r';
    if (c == '\n') {
      if (!after_cr) return fail(400, "a bare LF ends a line (HTTP lines end with CRLF)");
      if (i >= pos_ + 3 && buffer[i - 2] == '\n') {
        end = i + 1;
        break;
      }
    } else if (after_cr) {
      return fail(400, "a bare CR in the request head");
    }
    if (i + 1 - pos_ > limits_.max_head_bytes) {
      return fail(431, fmt::format("the request head is larger than {} bytes", limits_.max_head_bytes));
    }
  }
  if (end == std::string_view::npos) {
    scanned_ = i;
    return State::kNeedMore;
  }
  if (end - pos_ > limits_.max_head_bytes) {
    return fail(431, fmt::format("the request head is larger than {} bytes", limits_.max_head_bytes));
  }
  const State head = parse_head(buffer.substr(pos_, end - pos_));
  pos_ = end;
  scanned_ = pos_;
  if (head == State::kError) return head;
  return phase_ == Phase::kDone ? State::kComplete : State::kHeadReady;
}

HttpRequestParser::State HttpRequestParser::parse_head(std::string_view head) {
  // head: lines each ending in CRLF (no bare CR / LF: checked while scanning), the last one empty.
  size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  if (line.size() > kMaxRequestLine) {
    return fail(414, fmt::format("the request line is longer than {} bytes", kMaxRequestLine));
  }
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return fail(400, "the request line is not 'METHOD TARGET HTTP/1.1' (single spaces)");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "the request method is not a token");
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u < 0x7f;
      })) {
    return fail(400, "the request target is empty or holds a space, control or non-ASCII byte");
  }
  if (version == "HTTP/1.1") {
    request_.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    request_.minor_version = 0;
  } else if (version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[5] >= '0' &&
             version[5] <= '9' && version[6] == '.' && version[7] >= '0' && version[7] <= '9') {
    return fail(505, fmt::format("HTTP version {} is not supported (1.0 and 1.1 are)", version));
  } else {
    return fail(400, "the request line does not end in an HTTP version");
  }
  request_.method.assign(method);
  request_.target.assign(target);
  std::string_view path = target;
  if (target.front() != '/' && target != "*") {
    // absolute-form (RFC 9112 section 3.2.2): the server takes the path after the authority.
    const std::string scheme = lower(target.substr(0, std::min<size_t>(target.size(), 8)));
    const size_t authority = scheme.starts_with("http://") ? 7 : scheme.starts_with("https://") ? 8 : 0;
    if (authority == 0) return fail(400, "the request target is neither a path nor an absolute URI");
    const size_t slash = target.find('/', authority);
    path = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  request_.path.assign(path.substr(0, path.find('?')));

  // Field lines.
  size_t host_fields = 0;
  // Copies: the fields vector may move its strings as it grows.
  std::vector<std::string> lengths, codings, connection;
  while (true) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string_view field = head.substr(start, line_end - start);
    if (field.empty()) break;
    if (field.front() == ' ' || field.front() == '\t') {
      return fail(400, "a folded field line (obs-fold) is not accepted");
    }
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || !is_token(field.substr(0, colon))) {
      return fail(400, fmt::format("malformed field line '{}' (a token, then ':' with no space before it)",
                                   field.substr(0, std::min<size_t>(field.size(), 64))));
    }
    const std::string_view value = trim_ows(field.substr(colon + 1));
    if (!is_field_value(value)) {
      return fail(400,
                  fmt::format("the value of field '{}' holds a control character", field.substr(0, colon)));
    }
    if (request_.fields.size() >= limits_.max_fields) {
      return fail(431, fmt::format("more than {} header fields", limits_.max_fields));
    }
    request_.fields.emplace_back(lower(field.substr(0, colon)), std::string(value));
    const std::string& name = request_.fields.back().first;
    const std::string_view stored = request_.fields.back().second;
    if (name == "host") {
      ++host_fields;
    } else if (name == "content-length") {
      if (!split_list(stored, lengths)) return fail(400, "an empty Content-Length value");
    } else if (name == "transfer-encoding") {
      if (!split_list(stored, codings)) return fail(400, "an empty element in Transfer-Encoding");
    } else if (name == "connection") {
      if (!split_list(stored, connection)) return fail(400, "an empty element in Connection");
    }
  }

  if (request_.minor_version == 1 && host_fields != 1) {
    return fail(400,
                host_fields == 0 ? "an HTTP/1.1 request without a Host field" : "more than one Host field");
  }
  if (host_fields > 1) return fail(400, "more than one Host field");
  // HTTP/1.1 keeps the connection unless told "close"; HTTP/1.0 closes it unless told "keep-alive".
  bool close = false, keep = false;
  for (const std::string& token : connection) {
    close = close || lower(token) == "close";
    keep = keep || lower(token) == "keep-alive";
  }
  request_.keep_alive = !close && (request_.minor_version == 1 || keep);

  bool chunked = false;
  if (!codings.empty()) {
    if (request_.minor_version == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (!lengths.empty()) return fail(400, "both Transfer-Encoding and Content-Length (ambiguous framing)");
    if (lower(codings.back()) != "chunked") return fail(400, "the last transfer coding is not chunked");
    for (size_t k = 0; k + 1 < codings.size(); ++k) {
      if (lower(codings[k]) == "chunked") return fail(400, "chunked applied more than once");
    }
    if (codings.size() > 1) {
      return fail(501,
                  fmt::format("transfer coding '{}' is not supported (only chunked is)", codings.front()));
    }
    chunked = true;
  }
  size_t length = 0;
  for (size_t k = 0; k < lengths.size(); ++k) {
    const std::string_view v = lengths[k];
    if (v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return fail(400, fmt::format("Content-Length '{}' is not a decimal number", v.substr(0, 32)));
    }
    if (k > 0 && v != lengths[0]) return fail(400, "Content-Length values disagree (ambiguous framing)");
    length = static_cast<size_t>(std::stoull(lengths[k]));
  }
  if (length > limits_.max_body_bytes) {
    return fail(413, fmt::format("the request body ({} bytes) is larger than the limit of {} bytes", length,
                                 limits_.max_body_bytes));
  }
  const bool has_body = chunked || length > 0;
  const std::string_view expect = request_.field("expect");
  if (!expect.empty() && request_.minor_version == 1) {
    if (lower(expect) != "100-continue")
      return fail(417, fmt::format("Expect '{}' is not supported", expect));
    request_.expect_continue = has_body;
  }
  if (chunked) {
    phase_ = Phase::kChunkSize;
  } else if (length > 0) {
    phase_ = Phase::kBodyLength;
    remaining_ = length;
  } else {
    phase_ = Phase::kDone;
  }
  return State::kHeadReady;
}

HttpRequestParser::State HttpRequestParser::parse_chunked(std::string_view buffer) {
  while (true) {
    switch (phase_) {
      case Phase::kChunkSize: {
        size_t cr = 0;
        switch (scan_line(buffer, pos_, kMaxChunkLine, scanned_, cr)) {
          case Line::kNeedMore:
            return State::kNeedMore;
          case Line::kFound:
            break;
          case Line::kTooLong:
            return fail(400, "a chunk-size line longer than 4096 bytes");
          default:
            return fail(400, "a bare CR or LF in a chunk-size line");
        }
        const std::string_view line = buffer.substr(pos_, cr - pos_);
        size_t digits = 0, size = 0;
        for (; digits < line.size() && hex_value(line[digits]) >= 0; ++digits) {
          if (digits == kMaxHexDigits) return fail(400, "a chunk size with more than 15 hex digits");
          size = size * 16 + static_cast<size_t>(hex_value(line[digits]));
        }
        std::string_view rest = line.substr(digits);
        while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
        if (digits == 0 || (!rest.empty() && (rest.front() != ';' || !is_field_value(rest)))) {
          return fail(400, fmt::format("bad chunk size line '{}'", line.substr(0, 32)));
        }
        pos_ = cr + 2;
        if (size == 0) {
          phase_ = Phase::kTrailers;
          break;
        }
        if (size > limits_.max_body_bytes - request_.body.size()) {
          return fail(413, fmt::format("the request body is larger than the limit of {} bytes",
                                       limits_.max_body_bytes));
        }
        remaining_ = size;
        phase_ = Phase::kChunkData;
        break;
      }
      case Phase::kChunkData: {
        const size_t take = std::min(remaining_, buffer.size() - pos_);
        request_.body.append(buffer.substr(pos_, take));
        pos_ += take;
        remaining_ -= take;
        if (remaining_ > 0) return State::kNeedMore;
        phase_ = Phase::kChunkEnd;
        break;
      }
      case Phase::kChunkEnd:
        if (buffer.size() - pos_ < 2) return State::kNeedMore;
        if (buffer.substr(pos_, 2) != "\r\n") return fail(400, "chunk data not followed by CRLF");
        pos_ += 2;
        scanned_ = pos_;
        phase_ = Phase::kChunkSize;
        break;
      case Phase::kTrailers: {
        size_t cr = 0;
        switch (scan_line(buffer, pos_, limits_.max_head_bytes, scanned_, cr)) {
          case Line::kNeedMore:
            return State::kNeedMore;
          case Line::kFound:
            break;
          case Line::kTooLong:
            return fail(431, "a trailer field larger than the head limit");
          default:
            return fail(400, "a bare CR or LF in the trailer section");
        }
        const std::string_view line = buffer.substr(pos_, cr - pos_);
        pos_ = cr + 2;
        if (line.empty()) {
          phase_ = Phase::kDone;
          return State::kComplete;
        }
        // Trailer fields are checked like header fields and dropped (none of them means anything here).
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos || !is_token(line.substr(0, colon)) ||
            !is_field_value(line.substr(colon + 1))) {
          return fail(400, "a malformed trailer field");
        }
        trailer_bytes_ += line.size() + 2;
        if (trailer_bytes_ > limits_.max_head_bytes) return fail(431, "the trailer section is too large");
        break;
      }
      default:
        return parse(buffer);
    }
  }
}

std::string_view http_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

std::string http_response_head(int status, int minor_version, bool keep_alive, int64_t content_length,
                               const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", status, http_reason(status));
  for (const auto& [name, value] : fields) out += fmt::format("{}: {}\r\n", name, value);
  if (content_length >= 0) {
    out += fmt::format("Content-Length: {}\r\n", content_length);
  } else if (minor_version >= 1) {
    out += "Transfer-Encoding: chunked\r\n";
  }
  if (!keep_alive) {
    out += "Connection: close\r\n";
  } else if (minor_version == 0) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

}  // namespace day0::serve
