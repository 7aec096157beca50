#include "day0/serve/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

namespace day0::serve {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenTag = 0;
constexpr uint64_t kWakeTag = 1;
constexpr uint64_t kFirstConnection = 2;
constexpr int kListenBacklog = 1024;
constexpr size_t kReadChunk = 64 * 1024;
// Bytes read ahead while a request is being handled (pipelined requests wait in the buffer).
constexpr size_t kReadAheadWhileBusy = 64 * 1024;
// Response bytes pending before pipelined requests stop being parsed, and before a stream is dropped.
constexpr size_t kMaxPendingForNext = 1 << 20;
constexpr size_t kMaxPendingStream = 16 << 20;
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr auto kScanEvery = std::chrono::milliseconds(50);
constexpr auto kStopDrainTime = std::chrono::seconds(2);

}  // namespace

// Named (not anonymous): members of HttpServer::Impl.
namespace http_detail {

// Wake-ups and handler results cross from other threads to the event thread through this (shared, so
// that a wake after the server is gone finds a live object and does nothing).
struct Mailbox {
  int fd = -1;  // eventfd
  std::mutex mutex;
  std::vector<uint64_t> woken;
  std::vector<std::pair<uint64_t, HttpReply>> replies;
  bool closed = false;

  ~Mailbox() {
    if (fd >= 0) ::close(fd);
  }
  void signal() {
    const uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(fd, &one, sizeof(one));
  }
  void wake(uint64_t id) {
    std::lock_guard lock(mutex);
    if (closed) return;
    woken.push_back(id);
    signal();
  }
  void reply(uint64_t id, HttpReply reply) {
    std::unique_lock lock(mutex);
    if (closed) {
      lock.unlock();
      if (reply.late) reply.late->abandon();
      return;
    }
    replies.emplace_back(id, std::move(reply));
    signal();
  }
};

// A fixed set of threads running handler calls in arrival order.
class HandlerPool {
 public:
  explicit HandlerPool(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { work(); });
  }
  ~HandlerPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

 private:
  void work() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace http_detail

namespace {

std::string peer_address(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(addr).sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr, text, sizeof(text));
  }
  return text;
}

}  // namespace

struct HttpServer::Impl {
  enum class Stage {
    kIdle,      // between requests (no byte of the next one yet)
    kReading,   // a request's head or body is arriving
    kHandling,  // a handler runs, or a LateResponse is producing the response
    kClosing,   // the last response is out; the write side is shut, unread bytes are discarded
  };

  struct Connection {
    uint64_t id = 0;
    int fd = -1;
    std::string peer;
    Stage stage = Stage::kIdle;
    std::string in;  // received, not yet consumed by a completed request
    HttpRequestParser parser;
    std::string out;  // response bytes not yet sent, from out_pos
    size_t out_pos = 0;
    Clock::time_point deadline = Clock::time_point::max();  // of the current stage's read
    Clock::time_point last_write = Clock::now();            // when bytes last went out (or were queued)
    bool read_closed = false;                               // the peer sent EOF
    bool close_after_write = false;                         // close once the pending bytes are out
    bool answered_last = false;  // a response said Connection: close: no request after it is read
    bool keep_alive = true;      // of the request being answered
    int minor_version = 1;
    bool handler_pending = false;  // a handler thread has the request
    std::shared_ptr<LateResponse> late;
    bool streamed = false;
    bool watched = false;     // added to the epoll set
    uint32_t registered = 0;  // its interest now
    size_t pending() const { return out.size() - out_pos; }
  };

  struct Route {
    std::string method;
    HttpHandler handler;
    bool quick = false;
  };

  explicit Impl(HttpServerOptions o)
      : options(std::move(o)), mailbox(std::make_shared<http_detail::Mailbox>()) {
    options.max_connections = std::max<int64_t>(1, options.max_connections);
    options.max_connections_per_client = std::max<int64_t>(1, options.max_connections_per_client);
  }

  ~Impl() {
    if (listen_fd >= 0) ::close(listen_fd);
    if (epoll_fd >= 0) ::close(epoll_fd);
    for (auto& [id, c] : connections) ::close(c.fd);
  }

  HttpServerOptions options;
  std::map<std::string, std::vector<Route>> routes;  // by path
  HttpErrorBody error_body;
  std::shared_ptr<http_detail::Mailbox> mailbox;
  std::unique_ptr<http_detail::HandlerPool> pool;
  int listen_fd = -1;
  int epoll_fd = -1;
  bool accepting = true;
  std::atomic<bool> stopping{false};
  std::unordered_map<uint64_t, Connection> connections;
  std::unordered_map<std::string, int64_t> per_client;
  uint64_t next_id = kFirstConnection;
  std::atomic<int64_t> open{0}, accepted{0}, refused{0}, timed_out{0}, client_gone{0}, busy{0};

  // ---- setup ----

  Result<int> bind() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(options.port);
    if (::getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
      return io_error(fmt::format("serve: cannot resolve the address '{}'", options.host));
    }
    int fd = -1;
    for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int yes = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
        ::close(fd);
        fd = -1;
      }
    }
    ::freeaddrinfo(found);
    if (fd < 0) {
      return io_error(fmt::format("serve: cannot bind {}:{} (in use, or not an address of this machine)",
                                  options.host, options.port));
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    const int bound_port =
        ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                          : reinterpret_cast<sockaddr_in&>(bound).sin_port);
    listen_fd = fd;
    epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    mailbox->fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd < 0 || mailbox->fd < 0)
      return io_error("serve: cannot create the event loop (epoll, eventfd)");
    watch(listen_fd, kListenTag, EPOLLIN);
    watch(mailbox->fd, kWakeTag, EPOLLIN);
    // Each connection is a descriptor: stay under the process's limit (raised to its hard limit).
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
      if (files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &files);
        ::getrlimit(RLIMIT_NOFILE, &files);
      }
      if (files.rlim_cur != RLIM_INFINITY) {
        options.max_connections = std::min<int64_t>(
            options.max_connections, std::max<int64_t>(1, static_cast<int64_t>(files.rlim_cur) - 64));
      }
    }
    pool = std::make_unique<http_detail::HandlerPool>(options.handler_threads);
    return bound_port;
  }

  void watch(int fd, uint64_t tag, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }

  // ---- the loop ----

  void run() {
    std::vector<epoll_event> events(256);
    auto next_scan = Clock::now() + kScanEvery;
    Clock::time_point drain_until = Clock::time_point::max();
    while (true) {
      if (stopping && drain_until == Clock::time_point::max()) {
        drain_until = Clock::now() + kStopDrainTime;
        begin_stop();
      }
      if (stopping && (connections.empty() || Clock::now() >= drain_until)) break;
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_scan - Clock::now());
      const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()),
                                 static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 1000)));
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[static_cast<size_t>(i)].data.u64;
        const uint32_t what = events[static_cast<size_t>(i)].events;
        if (tag == kListenTag) {
          accept_all();
        } else if (tag == kWakeTag) {
          take_mail();
        } else if (auto it = connections.find(tag); it != connections.end()) {
          on_event(it->second, what);
        }
      }
      if (Clock::now() >= next_scan) {
        scan_deadlines();
        next_scan = Clock::now() + kScanEvery;
      }
    }
    {
      std::lock_guard lock(mailbox->mutex);
      mailbox->closed = true;
    }
    while (!connections.empty()) drop(connections.begin()->second, false);
    pool.reset();  // handlers still queued run now and find the mailbox closed
    take_mail();
  }

  void begin_stop() {
    if (listen_fd >= 0) {
      ::close(listen_fd);
      listen_fd = -1;
    }
    // Idle connections go now; the others once their response bytes are out.
    std::vector<uint64_t> idle;
    for (auto& [id, c] : connections)
      if (c.stage != Stage::kHandling && c.pending() == 0) idle.push_back(id);
    for (uint64_t id : idle) drop(connections.at(id), false);
    for (auto& [id, c] : connections) c.close_after_write = c.answered_last = true;
  }

  void accept_all() {
    while (accepting && listen_fd >= 0) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int fd =
          ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: stop accepting until the next deadline scan (the backlog holds them).
          accepting = false;
          ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        }
        return;  // EAGAIN: none left; others (ECONNABORTED...) concern that one connection
      }
      const std::string peer = peer_address(addr);
      int64_t& from_peer = per_client[peer];
      if (open >= options.max_connections || from_peer >= options.max_connections_per_client) {
        if (from_peer == 0) per_client.erase(peer);
        refuse(fd);
        continue;
      }
      ++from_peer;
      ++open;
      ++accepted;
      const int yes = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
      const uint64_t id = next_id++;
      Connection& c = connections[id];
      c.id = id;
      c.fd = fd;
      c.peer = peer;
      c.parser = HttpRequestParser(options.limits);
      c.deadline = Clock::now() + options.head_timeout;
      update_interest(c);
    }
  }

  // Over a connection cap: a 503 written without waiting (the socket's buffer takes it), then closed.
  void refuse(int fd) {
    ++refused;
    HttpResponse r = error_response(503, "too many connections; try again later");
    const std::string bytes =
        http_response_head(r.status, 1, false, static_cast<int64_t>(r.body.size()), with_content_type(r)) +
        r.body;
    [[maybe_unused]] const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(fd);
  }

  void take_mail() {
    uint64_t count = 0;
    [[maybe_unused]] const auto n = ::read(mailbox->fd, &count, sizeof(count));
    std::vector<uint64_t> woken;
    std::vector<std::pair<uint64_t, HttpReply>> replies;
    {
      std::lock_guard lock(mailbox->mutex);
      woken.swap(mailbox->woken);
      replies.swap(mailbox->replies);
    }
    for (auto& [id, reply] : replies) {
      auto it = connections.find(id);
      if (it == connections.end()) {
        // The client left while its handler ran.
        if (reply.late) reply.late->abandon();
        continue;
      }
      it->second.handler_pending = false;
      install(it->second, std::move(reply));
      if (auto again = connections.find(id); again != connections.end()) pump(again->second);
    }
    std::sort(woken.begin(), woken.end());
    woken.erase(std::unique(woken.begin(), woken.end()), woken.end());
    for (uint64_t id : woken) {
      auto it = connections.find(id);
      if (it == connections.end() || !it->second.late) continue;
      poll_late(it->second);
      if (auto again = connections.find(id); again != connections.end()) pump(again->second);
    }
  }

  void on_event(Connection& c, uint32_t what) {
    const uint64_t id = c.id;
    if ((what & EPOLLERR) != 0) return drop(c, true);
    if ((what & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) != 0 &&
        !read_some(c, (what & (EPOLLRDHUP | EPOLLHUP)) != 0)) {
      return;
    }
    if (!connections.contains(id)) return;
    if ((what & EPOLLOUT) != 0 && !flush(c)) return;
    pump(c);
  }

  size_t read_cap(const Connection& c) const {
    if (c.stage == Stage::kHandling) return kReadAheadWhileBusy;
    if (c.stage == Stage::kClosing) return kReadChunk;
    // A chunked body may carry framing beside its data; the parser bounds both.
    return options.limits.max_head_bytes + 2 * options.limits.max_body_bytes + kReadChunk;
  }

  // Reads what the socket has (up to the stage's cap). `hangup`: epoll saw the peer's write side
  // close. False when the connection was dropped.
  bool read_some(Connection& c, bool hangup) {
    char buffer[kReadChunk];
    bool eof = false;
    while (c.in.size() < read_cap(c)) {
      const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
      if (n > 0) {
        if (c.stage == Stage::kClosing) continue;  // discarded
        c.in.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      drop(c, true);
      return false;
    }
    if (!eof && !hangup) return true;
    c.read_closed = true;
    // Nothing more can arrive: a response still being produced has no one to go to (a client that
    // only half-closes is taken as gone, as most servers do); otherwise the requests already received
    // are answered and the connection closes after them.
    if (c.stage == Stage::kHandling || c.stage == Stage::kClosing) {
      drop(c, c.stage == Stage::kHandling);
      return false;
    }
    c.close_after_write = true;
    if (c.in.empty() && c.pending() == 0) {
      drop(c, false);
      return false;
    }
    return true;
  }

  // Parses and dispatches the requests in the buffer while the connection can take one, then writes.
  void pump(Connection& c) {
    const uint64_t id = c.id;
    while ((c.stage == Stage::kIdle || c.stage == Stage::kReading) && !c.answered_last &&
           c.pending() < kMaxPendingForNext) {
      const bool dispatched = next_request(c);
      if (!connections.contains(id)) return;
      if (!dispatched) break;
    }
    if (connections.contains(id)) flush(c);
  }

  // Advances the parser; true when a request was dispatched (the loop may take the next one).
  bool next_request(Connection& c) {
    while (true) {
      const auto state = c.parser.parse(c.in);
      if (state == HttpRequestParser::State::kNeedMore) {
        if (c.parser.started() && c.stage == Stage::kIdle) {
          c.stage = Stage::kReading;
          c.deadline = Clock::now() + options.head_timeout;
        }
        if (c.read_closed && c.in.size() > 0) {
          // The client closed with half a request: nothing to answer.
          drop(c, false);
        } else if (c.read_closed && c.pending() == 0) {
          drop(c, false);
        } else if (c.in.size() >= read_cap(c)) {
          fail(c, 413, "the request is larger than the limits allow");
        }
        return false;
      }
      if (state == HttpRequestParser::State::kHeadReady) {
        c.stage = Stage::kReading;
        c.deadline = Clock::now() + options.body_timeout;
        if (c.parser.request().expect_continue) queue(c, "HTTP/1.1 100 Continue\r\n\r\n");
        continue;
      }
      if (state == HttpRequestParser::State::kError) {
        const HttpError e = c.parser.error();
        fail(c, e.status, e.message);
        return false;
      }
      HttpRequest request = std::move(c.parser.request());
      c.in.erase(0, c.parser.consumed());
      c.parser.reset();
      dispatch(c, std::move(request));
      return true;
    }
  }

  // Answers an error of the connection's framing or timing and closes it after the answer.
  void fail(Connection& c, int status, const std::string& message) {
    c.in.clear();
    c.keep_alive = false;
    c.minor_version = 1;
    if (c.stage != Stage::kHandling) ++busy;
    c.stage = Stage::kHandling;
    send_whole(c, error_response(status, message));
  }

  void dispatch(Connection& c, HttpRequest request) {
    c.stage = Stage::kHandling;
    ++busy;
    c.deadline = Clock::time_point::max();
    c.keep_alive = request.keep_alive && !c.read_closed;
    c.minor_version = request.minor_version;
    auto found = routes.find(request.path);
    if (found == routes.end()) {
      return send_whole(c, error_response(404, fmt::format("no route {} {}", request.method, request.path)));
    }
    const Route* route = nullptr;
    std::string allowed;
    for (const Route& r : found->second) {
      if (r.method == request.method) route = &r;
      allowed += allowed.empty() ? r.method : ", " + r.method;
    }
    if (route == nullptr) {
      HttpResponse r = error_response(
          405, fmt::format("{} is not allowed on {} (allowed: {})", request.method, request.path, allowed));
      r.fields.emplace_back("Allow", allowed);
      return send_whole(c, std::move(r));
    }
    const uint64_t id = c.id;
    HttpWake wake = [mailbox = std::weak_ptr<http_detail::Mailbox>(mailbox), id] {
      if (auto m = mailbox.lock()) m->wake(id);
    };
    if (route->quick) return install(c, route->handler(request, wake));
    c.handler_pending = true;
    pool->post([handler = route->handler, request = std::move(request), wake = std::move(wake),
                mailbox = mailbox, id, this] {
      HttpReply reply;
      try {
        reply = handler(request, wake);
      } catch (const std::exception& ex) {
        reply.response = error_response(500, fmt::format("internal error: {}", ex.what()));
      } catch (...) {
        reply.response = error_response(500, "internal error: unknown exception");
      }
      mailbox->reply(id, std::move(reply));
    });
  }

  void install(Connection& c, HttpReply reply) {
    if (!reply.late) return send_whole(c, std::move(reply.response));
    c.late = std::move(reply.late);
    c.streamed = reply.streamed;
    if (c.streamed) {
      // HTTP/1.0 has no chunks: the stream runs until the connection closes.
      if (c.minor_version == 0) c.keep_alive = false;
      queue(c, http_response_head(reply.response.status, c.minor_version, c.keep_alive, -1,
                                  with_content_type(reply.response)));
    }
    poll_late(c);
  }

  void poll_late(Connection& c) {
    std::string chunk;
    HttpResponse whole;
    const bool done = c.late->poll(chunk, whole);
    if (c.streamed) {
      if (!chunk.empty()) {
        queue(c, c.minor_version >= 1 ? fmt::format("{:x}\r\n{}\r\n", chunk.size(), chunk) : chunk);
      }
      if (done && c.minor_version >= 1) queue(c, "0\r\n\r\n");
      if (done) {
        c.late.reset();
        finish(c);
      } else if (c.pending() > kMaxPendingStream) {
        return drop(c, true);  // a client that does not read its stream
      }
    } else if (done) {
      c.late.reset();
      send_whole(c, std::move(whole));
    }
  }

  void send_whole(Connection& c, HttpResponse r) {
    queue(c, http_response_head(r.status, c.minor_version, c.keep_alive, static_cast<int64_t>(r.body.size()),
                                with_content_type(r)) +
                 r.body);
    finish(c);
  }

  // The response is wholly queued: the connection takes the next request, or closes once it is out.
  void finish(Connection& c) {
    --busy;
    if (!c.keep_alive) c.close_after_write = c.answered_last = true;
    c.stage = Stage::kIdle;
    c.deadline = Clock::now() + options.idle_timeout;
  }

  void queue(Connection& c, std::string_view bytes) {
    if (c.pending() == 0) {
      c.out.clear();
      c.out_pos = 0;
      c.last_write = Clock::now();
    }
    c.out.append(bytes);
  }

  // Writes what the socket takes. False when the connection was dropped or closed.
  bool flush(Connection& c) {
    while (c.pending() > 0) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.pending(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<size_t>(n);
        c.last_write = Clock::now();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      drop(c, c.stage == Stage::kHandling);
      return false;
    }
    if (c.pending() == 0) {
      c.out.clear();
      c.out_pos = 0;
      if (c.stage == Stage::kIdle) c.deadline = Clock::now() + options.idle_timeout;
      if (c.close_after_write && c.stage == Stage::kIdle) {
        if (c.read_closed) {
          drop(c, false);
          return false;
        }
        // Lingering close: the client reads the answer before it could see a reset for unread bytes.
        ::shutdown(c.fd, SHUT_WR);
        c.stage = Stage::kClosing;
        c.in.clear();
        c.deadline = Clock::now() + kLingerTime;
      }
    }
    update_interest(c);
    return true;
  }

  void update_interest(Connection& c) {
    uint32_t want = 0;
    if (!c.read_closed) want |= EPOLLRDHUP | (c.in.size() < read_cap(c) ? uint32_t{EPOLLIN} : 0u);
    if (c.pending() > 0) want |= EPOLLOUT;
    if (c.watched && want == c.registered) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = c.id;
    ::epoll_ctl(epoll_fd, c.watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &ev);
    c.watched = true;
    c.registered = want;
  }

  void scan_deadlines() {
    const auto now = Clock::now();
    if (!accepting && listen_fd >= 0) {
      accepting = true;
      watch(listen_fd, kListenTag, EPOLLIN);
    }
    std::vector<uint64_t> expired;
    for (auto& [id, c] : connections) {
      const bool stalled = c.pending() > 0 && now - c.last_write > options.write_timeout;
      if (stalled || (c.stage != Stage::kHandling && c.pending() == 0 && now >= c.deadline)) {
        expired.push_back(id);
      }
    }
    for (uint64_t id : expired) {
      Connection& c = connections.at(id);
      if (c.pending() > 0 || c.stage == Stage::kHandling) {
        ++timed_out;
        drop(c, c.stage == Stage::kHandling);
      } else if (c.stage == Stage::kReading) {
        ++timed_out;
        fail(c, 408,
             c.parser.request().method.empty() ? "the request head did not arrive in time"
                                               : "the request body did not arrive in time");
        if (connections.contains(id)) pump(c);
      } else {
        drop(c, false);  // idle keep-alive, or the lingering close is over
      }
    }
  }

  // Closes the connection; `abandoned`: its response was not finished (the work behind it stops).
  void drop(Connection& c, bool abandoned) {
    if (c.late) c.late->abandon();
    if (abandoned && (c.late || c.handler_pending)) ++client_gone;
    if (c.stage == Stage::kHandling) --busy;
    ::close(c.fd);
    if (auto it = per_client.find(c.peer); it != per_client.end() && --it->second <= 0) per_client.erase(it);
    --open;
    connections.erase(c.id);
  }

  std::vector<std::pair<std::string, std::string>> with_content_type(const HttpResponse& r) const {
    auto fields = r.fields;
    fields.insert(fields.begin(), {"Content-Type", r.content_type});
    return fields;
  }

  HttpResponse error_response(int status, const std::string& message) const {
    if (error_body) return error_body(status, message);
    HttpResponse r;
    r.status = status;
    r.content_type = "text/plain";
    r.body = message;
    return r;
  }
};

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() = default;

void HttpServer::route(std::string method, std::string path, HttpHandler handler, bool quick) {
  impl_->routes[std::move(path)].push_back(Impl::Route{std::move(method), std::move(handler), quick});
}

void HttpServer::set_error_body(HttpErrorBody error_body) {
  impl_->error_body = std::move(error_body);
}

Result<int> HttpServer::bind() {
  return impl_->bind();
}

bool HttpServer::run() {
  if (impl_->epoll_fd < 0) return false;
  impl_->run();
  return true;
}

void HttpServer::stop() {
  impl_->stopping = true;
  if (impl_->mailbox->fd >= 0) impl_->mailbox->signal();
}

HttpCounters HttpServer::counters() const {
  return HttpCounters{impl_->open, impl_->accepted, impl_->refused, impl_->timed_out, impl_->client_gone};
}

int64_t HttpServer::busy() const {
  return impl_->busy;
}

}  // namespace day0::serve
