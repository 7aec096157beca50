// The HTTP/1.1 request parser of `day0 serve`: framing read exactly, whatever the pieces the bytes
// arrive in, and every ambiguous or malformed message refused with its status.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "day0/serve/http_message.h"

namespace day0::serve {
namespace {

struct Outcome {
  std::vector<HttpRequest> requests;
  int error = 0;    // status of the error that ended the parse; 0: none
  size_t left = 0;  // bytes left unparsed (a request still incomplete)
};

// Feeds `bytes` in pieces of `piece` bytes (0: all at once), taking every request out as it completes.
Outcome parse_all(const std::string& bytes, size_t piece = 0, HttpLimits limits = {}) {
  Outcome out;
  HttpRequestParser parser(limits);
  std::string buffer;
  size_t fed = 0;
  while (true) {
    auto state = parser.parse(buffer);
    if (state == HttpRequestParser::State::kHeadReady) continue;
    if (state == HttpRequestParser::State::kError) {
      out.error = parser.error().status;
      return out;
    }
    if (state == HttpRequestParser::State::kComplete) {
      out.requests.push_back(parser.request());
      buffer.erase(0, parser.consumed());
      parser.reset();
      continue;
    }
    if (fed == bytes.size()) break;
    const size_t n = piece == 0 ? bytes.size() - fed : std::min(piece, bytes.size() - fed);
    buffer.append(bytes, fed, n);
    fed += n;
  }
  out.left = buffer.size();
  return out;
}

TEST(HttpMessage, ReadsARequestWithItsFieldsAndBody) {
  const Outcome o = parse_all(
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
      "X-Spaced:   value with  inner  spaces \t\r\nContent-Length: 5\r\n\r\nhello");
  ASSERT_EQ(o.error, 0);
  ASSERT_EQ(o.requests.size(), 1u);
  const HttpRequest& r = o.requests[0];
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.target, "/v1/completions?x=1");
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(r.body, "hello");
  EXPECT_EQ(r.field("content-type"), "application/json");
  EXPECT_EQ(r.field("x-spaced"), "value with  inner  spaces");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(o.left, 0u);
}

TEST(HttpMessage, AnyPiecesGiveTheSameRequests) {
  // Pipelined: a chunked POST with an extension and a trailer, then a GET, then half a request.
  const std::string bytes =
      "\r\nPOST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: t\r\n\r\n"
      "GET /health HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
      "GET /next HTTP/1.1\r\nHo";
  for (size_t piece : {0, 1, 2, 3, 7, 64}) {
    SCOPED_TRACE(piece);
    const Outcome o = parse_all(bytes, piece);
    ASSERT_EQ(o.error, 0);
    ASSERT_EQ(o.requests.size(), 2u);
    EXPECT_EQ(o.requests[0].body, "helloabcdefghijklmnopqrstuvwxyz");
    EXPECT_EQ(o.requests[0].path, "/a");
    EXPECT_EQ(o.requests[1].path, "/health");
    EXPECT_FALSE(o.requests[1].keep_alive);
    EXPECT_EQ(o.left, std::string("GET /next HTTP/1.1\r\nHo").size());
  }
}

TEST(HttpMessage, ConnectionAndVersionRules) {
  auto keep = [](const std::string& head) {
    const Outcome o = parse_all(head);
    EXPECT_EQ(o.error, 0) << head;
    return !o.requests.empty() && o.requests[0].keep_alive;
  };
  EXPECT_TRUE(keep("GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, close\r\n\r\n"));
  EXPECT_FALSE(keep("GET / HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(keep("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
  // absolute-form targets are served by their path
  const Outcome o = parse_all("GET http://example.com:8000/health?x HTTP/1.1\r\nHost: example.com\r\n\r\n");
  ASSERT_EQ(o.requests.size(), 1u);
  EXPECT_EQ(o.requests[0].path, "/health");
  // 100-continue only where a body follows
  const Outcome c =
      parse_all("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi");
  ASSERT_EQ(c.requests.size(), 1u);
  EXPECT_TRUE(c.requests[0].expect_continue);
}

struct Refusal {
  const char* what;
  std::string bytes;
  int status;
};

TEST(HttpMessage, AmbiguousOrMalformedFramingIsRefused) {
  const std::string host = "Host: h\r\n";
  const std::vector<Refusal> cases = {
      {"two different Content-Length",
       "POST / HTTP/1.1\r\n" + host + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
      {"a Content-Length list that disagrees",
       "POST / HTTP/1.1\r\n" + host + "Content-Length: 3, 4\r\n\r\nabcd", 400},
      {"chunked beside Content-Length",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
       400},
      {"Content-Length before chunked",
       "POST / HTTP/1.1\r\n" + host + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       400},
      {"chunked not last", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked, gzip\r\n\r\n", 400},
      {"chunked twice", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked, chunked\r\n\r\n", 400},
      {"an unknown coding", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       400},
      {"a signed Content-Length", "POST / HTTP/1.1\r\n" + host + "Content-Length: +3\r\n\r\nabc", 400},
      {"a hex Content-Length", "POST / HTTP/1.1\r\n" + host + "Content-Length: 0x3\r\n\r\nabc", 400},
      {"a bad chunk size", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"a negative chunk size", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n-1\r\n",
       400},
      {"an overlong chunk size",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", 400},
      {"chunk data without its CRLF",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n", 400},
      {"a bare LF in the head", "GET / HTTP/1.1\nHost: h\n\n", 400},
      {"a bare CR in the head", "GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n", 400},
      {"a space before the colon", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400},
      {"a folded field", "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400},
      {"a control byte in a value", "GET / HTTP/1.1\r\nHost: h\r\nX: a" + std::string(1, '\0') + "b\r\n\r\n",
       400},
      {"no Host in HTTP/1.1", "GET / HTTP/1.1\r\nX: y\r\n\r\n", 400},
      {"two Host fields", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"two spaces in the request line", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"a target that is not a path", "GET health HTTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"HTTP/2.0", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505},
      {"not HTTP", "GET / FTP/1.1\r\nHost: h\r\n\r\n", 400},
      {"an unknown expectation",
       "POST / HTTP/1.1\r\n" + host + "Expect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417},
      {"a request line over 8 KiB", "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n", 414},
      {"a head over the limit", "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(70000, 'a') + "\r\n\r\n",
       431},
      {"too many fields",
       "GET / HTTP/1.1\r\nHost: h\r\n" +
           [] {
             std::string s;
             for (int i = 0; i < 200; ++i) s += "X-" + std::to_string(i) + ": v\r\n";
             return s;
           }() +
           "\r\n",
       431},
      {"a body over the limit", "POST / HTTP/1.1\r\n" + host + "Content-Length: 99999999999\r\n\r\n", 413},
      {"chunks over the limit",
       "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\nFFFFFFFF\r\n", 413},
  };
  for (const Refusal& c : cases) {
    for (size_t piece : {0, 1}) {
      const Outcome o = parse_all(c.bytes, piece);
      EXPECT_EQ(o.error, c.status) << c.what << " (pieces of " << piece << ")";
      EXPECT_TRUE(o.requests.empty()) << c.what;
    }
  }
}

TEST(HttpMessage, ResponseHeadFramesByLengthOrChunks) {
  EXPECT_EQ(http_response_head(200, 1, true, 2, {{"Content-Type", "application/json"}}),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n");
  EXPECT_EQ(http_response_head(200, 1, true, -1, {}),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(http_response_head(400, 0, false, -1, {}),
            "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
}

}  // namespace
}  // namespace day0::serve
