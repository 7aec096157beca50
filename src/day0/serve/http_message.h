#pragma once
// HTTP/1.1 request framing for `day0 serve` (RFC 9112), strict on purpose: every message whose length a
// proxy in front of us could read differently is refused, so that no request can be smuggled past it.
// Refused (400 unless noted, and the connection is closed): a bare CR or LF as a line end, a space
// before a field's colon, a folded field line, control characters in a field value, a missing or
// repeated Host in HTTP/1.1, Content-Length values that disagree or are not decimal digits,
// Transfer-Encoding beside Content-Length or in HTTP/1.0, a transfer coding list not ending in
// chunked (other codings: 501), a bad chunk size or chunk end; a head over the limit is 431, a body
// over it 413, a request line over 8 KiB 414, an HTTP version other than 1.0 / 1.1 505, an Expect
// other than 100-continue 417.
//
// The parser is incremental: bytes arrive in any pieces (one byte at a time included) and each byte
// is examined a bounded number of times, so a slow client costs no more than a fast one. Pipelined
// requests stay in the buffer for the next parse.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace day0::serve {

struct HttpLimits {
  size_t max_head_bytes = 64 * 1024;  // request line + fields (431 above)
  size_t max_fields = 128;            // field lines (431 above)
  size_t max_body_bytes = 8 << 20;    // decoded body (413 above)
};

struct HttpRequest {
  std::string method;     // e.g. "POST"
  std::string target;     // as sent (origin-form, or the path of an absolute-form target)
  std::string path;       // target without the query
  int minor_version = 1;  // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> fields;  // names lower-case, values trimmed
  std::string body;                                         // decoded (chunked framing removed)
  bool keep_alive = true;
  bool expect_continue = false;  // the client waits for "100 Continue" before sending the body

  // The value of the first field named `name` (lower-case), or empty.
  std::string_view field(std::string_view name) const;
};

struct HttpError {
  int status = 400;
  std::string message;
};

class HttpRequestParser {
 public:
  enum class State {
    kNeedMore,   // give it more bytes
    kHeadReady,  // the head is parsed, the body is still to come (request() has method, fields...)
    kComplete,   // request() is whole; consumed() bytes of the buffer are its
    kError,      // error() says why; the connection must be closed after the answer
  };

  explicit HttpRequestParser(HttpLimits limits = {}) : limits_(limits) {}

  // Reads on from where the last call stopped in `buffer`, which holds every byte received since the
  // last reset() (the caller appends to it). kHeadReady comes once per request that has a body.
  State parse(std::string_view buffer);

  HttpRequest& request() { return request_; }
  const HttpError& error() const { return error_; }
  // Bytes of the buffer the completed request took (the next request starts there).
  size_t consumed() const { return pos_; }
  // True once any byte of the current request (not a leading empty line) has arrived.
  bool started() const { return started_; }
  // Ready for the next request (the caller drops consumed() bytes from its buffer first).
  void reset();

 private:
  enum class Phase { kHead, kBodyLength, kChunkSize, kChunkData, kChunkEnd, kTrailers, kDone, kFailed };
  State fail(int status, std::string message);
  State parse_head(std::string_view head);
  State parse_chunked(std::string_view buffer);

  HttpLimits limits_;
  HttpRequest request_;
  HttpError error_;
  Phase phase_ = Phase::kHead;
  size_t pos_ = 0;        // next unread byte of the buffer
  size_t scanned_ = 0;    // head: bytes already searched for the end of the head
  size_t remaining_ = 0;  // body bytes still expected (length, or of the current chunk)
  size_t trailer_bytes_ = 0;
  bool started_ = false;
};

// The response head: status line, the given fields, Content-Length or chunked framing, Connection.
// `content_length` < 0: chunked (HTTP/1.1) or until close (HTTP/1.0, `keep_alive` must be false).
std::string http_response_head(int status, int minor_version, bool keep_alive, int64_t content_length,
                               const std::vector<std::pair<std::string, std::string>>& fields);
std::string_view http_reason(int status);

}  // namespace day0::serve
