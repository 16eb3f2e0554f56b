#include "server/http_server.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <list>
#include <optional>
#include <thread>

#include "base/logging.h"
#include "base/mutex.h"
#include "server/body_decoding.h"
#include "server/worker_pool.h"

namespace dsv4::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;

namespace {

// After a response that ends the connection, the server stops sending and
// reads (and drops) what the client still sends for at most this long, so
// that unread request bytes do not make the kernel reset the connection
// before the client has read the response.
constexpr Ms kLingerTime{1000};
// After the grace period of Stop, connections still open are cut; the
// handlers then see failed writes within this long.
constexpr Ms kCutWait{1000};
constexpr size_t kIdleReadBytes = 4096;
constexpr size_t kDiscardBytes = 16 << 10;

std::string SerializeHead(const HttpResponse& r, bool chunked, bool close, size_t length) {
  std::string s =
      fmt::format("HTTP/1.1 {} {}\r\n", r.status,
                  std::string(http::obsolete_reason(static_cast<http::status>(r.status))));
  if (!r.content_type.empty()) s += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [name, value] : r.headers) s += name + ": " + value + "\r\n";
  s += chunked ? std::string("Transfer-Encoding: chunked\r\n")
               : fmt::format("Content-Length: {}\r\n", length);
  if (close) s += "Connection: close\r\n";
  s += "\r\n";
  return s;
}

// Writes `data` to a non-blocking socket from a worker thread; each wait for
// progress is bounded by `idle`.  A cut connection (shutdown by the server)
// fails at once.
bool SendAll(int fd, std::string_view data, Ms idle) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, static_cast<int>(idle.count()));
      if (r == 0) return false;  // the client reads nothing: write deadline
      if (r < 0 && errno != EINTR) return false;
      continue;  // the next send reports errors
    }
    return false;
  }
  return true;
}

// "1.5" for 1500 ms, as the flags are written.
std::string Seconds(Ms ms) { return fmt::format("{:g}", static_cast<double>(ms.count()) / 1000); }

bool IsHttpError(const ErrorCode& ec) {
  return ec.category() == http::make_error_code(http::error::bad_target).category();
}

}  // namespace

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (beast::iequals(n, name)) return v;
  }
  return "";
}

// Server-wide state shared by the acceptor, the connections and Stop.
// Members are destroyed in reverse order: the io_context (whose destruction
// may destroy connections) goes before the registry and after the pool.
class HttpCore {
 public:
  HttpCore(HttpTransportOptions o, HttpRouter& r)
      : opt(std::move(o)),
        router(r),
        acceptor(net::make_strand(ioc)),
        retry_timer(acceptor.get_executor()),
        work(net::make_work_guard(ioc)),
        pool(opt.worker_threads) {}

  void Accept();
  void OnAccept(const ErrorCode& ec, tcp::socket socket);
  void Admit(tcp::socket socket) EXCLUDES(mu);
  void BeginExchange() EXCLUDES(mu);
  void EndExchange() EXCLUDES(mu);
  void Unregister(std::list<std::weak_ptr<Connection>>::iterator it) EXCLUDES(mu);
  std::vector<std::shared_ptr<Connection>> Connections() EXCLUDES(mu);
  // Waits until no exchange is busy; false when `deadline` passed first.
  bool WaitIdle(std::optional<Clock::time_point> deadline) EXCLUDES(mu);
  // Waits until every connection is closed or `deadline` passes.
  void WaitClosed(Clock::time_point deadline) EXCLUDES(mu);

  const HttpTransportOptions opt;
  HttpRouter& router;
  std::atomic<bool> draining{false};

  Mutex mu;
  CondVar cv;  // signalled when busy or num_conns drops
  std::list<std::weak_ptr<Connection>> conns GUARDED_BY(mu);  // oldest first
  int64_t num_conns GUARDED_BY(mu) = 0;
  int64_t busy GUARDED_BY(mu) = 0;  // exchanges not yet answered
  bool stop_called GUARDED_BY(mu) = false;

  net::io_context ioc;
  tcp::acceptor acceptor;  // on its own strand
  net::steady_timer retry_timer;
  net::executor_work_guard<net::io_context::executor_type> work;
  WorkerPool pool;
};

// One client connection.  Everything but the worker-side writes and peeks
// runs on the connection's strand.  While a worker owns the exchange no
// asynchronous operation is pending on the socket, and the descriptor is
// never closed (only shut down) until the worker hands the exchange back.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class State { kIdle, kHeader, kBody, kBusy, kLinger, kClosed };

  Connection(HttpCore& core, tcp::socket socket)
      : core_(core), stream_(std::move(socket)), fd_(stream_.socket().native_handle()) {}

  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->WaitForRequest(); });
  }
  // Closes the connection unless a request on it is being handled.
  void CloseIfNotBusy() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->state_ != State::kBusy) self->Close();
      self->evicting_ = false;
    });
  }
  // Ends the connection whatever it is doing.
  void Cut() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->Close(); });
  }
  State state() const { return state_; }
  bool TryMarkEvicting() { return !evicting_.exchange(true); }
  void set_registry_entry(std::list<std::weak_ptr<Connection>>::iterator it) { reg_ = it; }

  // --- worker side (the exchange's thread) ---
  bool WorkerSend(std::string_view data) {
    if (cut_) return false;
    return SendAll(fd_, data, core_.opt.read_timeout);
  }
  bool PeerClosed() const {
    if (cut_) return true;
    pollfd p{fd_, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  }
  // Whether the response to the current request ends the connection.
  bool CloseAfterResponse() const { return !keep_alive_ || core_.draining; }
  const net::any_io_executor& executor() { return executor_; }
  HttpCore& core() { return core_; }

  // --- back on the strand ---
  void FromWorker() {
    worker_owned_ = false;
    if (cut_) Close();
  }
  void Reply(HttpResponse r, bool close, bool linger) {
    if (closed_) return;
    close = close || CloseAfterResponse();
    out_ = SerializeHead(r, /*chunked=*/false, close, r.body.size());
    if (!head_) out_ += r.body;
    stream_.expires_after(core_.opt.read_timeout);
    net::async_write(stream_, net::buffer(out_),
                     [self = shared_from_this(), close, linger](const ErrorCode& ec, size_t) {
                       self->AfterResponse(!ec, close || linger);
                     });
  }
  void AfterResponse(bool ok, bool close) {
    if (closed_) return;
    EndExchange();
    if (!ok) return Close();
    if (close) return Linger();
    WaitForRequest();
  }
  void Close() {
    if (closed_) return;
    if (worker_owned_) {  // the worker's writes and peeks fail from now on
      cut_ = true;
      ::shutdown(fd_, SHUT_RDWR);
      return;
    }
    closed_ = true;
    state_ = State::kClosed;
    DisarmDeadline();
    EndExchange();
    ErrorCode ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    core_.Unregister(reg_);
  }

 private:
  void WaitForRequest() {
    if (closed_) return;
    state_ = State::kIdle;
    if (core_.draining) return Close();
    if (buffer_.size() > 0) return ReadHeader();  // pipelined
    stream_.expires_after(core_.opt.read_timeout);
    stream_.async_read_some(buffer_.prepare(kIdleReadBytes),
                            [self = shared_from_this()](const ErrorCode& ec, size_t n) {
                              if (self->closed_) return;
                              if (ec) return self->Close();
                              self->buffer_.commit(n);
                              self->ReadHeader();
                            });
  }

  // The header deadline runs from the first byte of the request.
  void ReadHeader() {
    state_ = State::kHeader;
    head_ = false;
    keep_alive_ = true;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(core_.opt.max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(core_.opt.max_body_bytes));
    stream_.expires_never();
    ArmDeadline(Clock::now() + core_.opt.header_timeout,
                fmt::format("request header not complete within {} s (--header-timeout)",
                            Seconds(core_.opt.header_timeout)));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](const ErrorCode& ec, size_t) {
                              if (self->closed_) return;
                              self->DisarmDeadline();
                              if (ec || self->expired_) return self->OnReadError(ec);
                              self->OnHeader();
                            });
  }

  void OnHeader() {
    state_ = State::kBody;
    body_deadline_ = Clock::now() + core_.opt.body_timeout;
    const auto& m = parser_->get();
    head_ = m.method() == http::verb::head;
    if (!parser_->is_done() && beast::iequals(m[http::field::expect], "100-continue")) {
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      stream_.expires_after(core_.opt.read_timeout);
      net::async_write(stream_, net::buffer(out_),
                       [self = shared_from_this()](const ErrorCode& ec, size_t) {
                         if (self->closed_) return;
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  // Each wait for body bytes is bounded by the read timeout, and the whole
  // body by the body timeout from the end of the header: a client sending a
  // byte just often enough to beat the first cannot hold the connection.
  void ReadBody() {
    if (parser_->is_done()) return OnRequest();
    const auto& o = core_.opt;
    const auto silence_end = Clock::now() + o.read_timeout;
    stream_.expires_never();
    if (body_deadline_ <= silence_end) {
      ArmDeadline(body_deadline_, fmt::format("request body not complete within {} s "
                                              "(--body-timeout)",
                                              Seconds(o.body_timeout)));
    } else {
      ArmDeadline(silence_end, fmt::format("no request body bytes for {} s (--read-timeout)",
                                           Seconds(o.read_timeout)));
    }
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = shared_from_this()](const ErrorCode& ec, size_t) {
                            if (self->closed_) return;
                            self->DisarmDeadline();
                            if (ec || self->expired_) return self->OnReadError(ec);
                            self->ReadBody();
                          });
  }

  // The deadlines of a request being read run on a timer of their own, not
  // the stream's (which closes the socket when it expires): a request that
  // is not read in time is answered 408 before the connection ends.
  void ArmDeadline(Clock::time_point when, std::string message) {
    const uint64_t seq = ++deadline_seq_;
    deadline_message_ = std::move(message);
    deadline_.expires_at(when);
    deadline_.async_wait([self = shared_from_this(), seq](const ErrorCode& ec) {
      if (ec || self->closed_ || seq != self->deadline_seq_) return;
      self->expired_ = true;  // the read below completes with operation_aborted
      ErrorCode ignored;
      self->stream_.socket().cancel(ignored);
    });
  }
  void DisarmDeadline() {
    ++deadline_seq_;
    deadline_.cancel();
  }

  void OnReadError(const ErrorCode& ec) {
    const auto& o = core_.opt;
    if (expired_) {
      expired_ = false;
      return ReplyError(408, deadline_message_);
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return ReplyError(431, fmt::format("request header over {} bytes", o.max_header_bytes));
    }
    if (ec == http::error::body_limit) {
      return ReplyError(413, fmt::format("request body over {} bytes", o.max_body_bytes));
    }
    // Resets and a client that stopped in the middle: nobody waits for an
    // answer.
    if (!IsHttpError(ec) || ec == http::error::end_of_stream ||
        ec == http::error::partial_message || ec == http::error::short_read) {
      return Close();
    }
    ReplyError(400, fmt::format("malformed request: {}", ec.message()));
  }

  // An answer before the request was read whole: the connection ends.
  void ReplyError(int status, const std::string& message) {
    state_ = State::kBody;
    head_ = false;
    keep_alive_ = false;
    Reply(core_.router.TransportError(status, message), /*close=*/true, /*linger=*/true);
  }

  void OnRequest() {
    state_ = State::kBusy;
    in_exchange_ = true;
    core_.BeginExchange();
    stream_.expires_never();
    auto& m = parser_->get();
    HttpRequest req;
    req.method = std::string(m.method_string());
    req.target = std::string(m.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& field : m) {
      req.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    req.body = std::move(m.body());
    keep_alive_ = m.keep_alive();
    parser_.reset();
    const DecodeResult decoded =
        DecodeBody(req.Header("Content-Encoding"), core_.opt.max_body_bytes, &req.body);
    if (decoded.http_status != 0) {
      return Reply(core_.router.TransportError(decoded.http_status, decoded.message), false, false);
    }
    std::optional<HttpResponse> answer;
    try {
      answer = core_.router.Route(req);
    } catch (const std::exception& e) {
      DSV4_LOG_ERROR("server: routing {} {} failed: {}", req.method, req.path, e.what());
      answer = core_.router.TransportError(500, "internal error");
    }
    if (answer) return Reply(std::move(*answer), false, false);
    worker_owned_ = true;
    auto exchange = std::make_shared<HttpExchange>(shared_from_this(), std::move(req));
    HttpCore* core = &core_;
    core_.pool.Submit([exchange, core] {
      try {
        core->router.Handle(*exchange);
      } catch (const std::exception& e) {
        DSV4_LOG_ERROR("server: handler of {} failed: {}", exchange->request().path, e.what());
        if (!exchange->answered()) exchange->Respond(core->router.TransportError(500, e.what()));
      }
    });
  }

  void EndExchange() {
    if (!in_exchange_) return;
    in_exchange_ = false;
    core_.EndExchange();
  }

  // Stop sending, drop what the client still sends, close at its end or
  // after kLingerTime.
  void Linger() {
    state_ = State::kLinger;
    ErrorCode ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (!discard_) discard_ = std::make_unique<char[]>(kDiscardBytes);
    stream_.expires_after(kLingerTime);
    ReadDiscard();
  }
  void ReadDiscard() {
    stream_.async_read_some(net::buffer(discard_.get(), kDiscardBytes),
                            [self = shared_from_this()](const ErrorCode& ec, size_t) {
                              if (self->closed_) return;
                              if (ec) return self->Close();
                              self->ReadDiscard();
                            });
  }

  HttpCore& core_;
  beast::tcp_stream stream_;
  net::any_io_executor executor_ = stream_.get_executor();
  const int fd_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  net::steady_timer deadline_{executor_};  // the request's read deadline (ArmDeadline)
  uint64_t deadline_seq_ = 0;              // which arming a firing timer belongs to
  std::string deadline_message_;           // the 408's message if it fires
  bool expired_ = false;                   // it fired: the pending read was cancelled
  Clock::time_point body_deadline_;
  std::string out_;  // what the strand is writing
  std::unique_ptr<char[]> discard_;
  std::list<std::weak_ptr<Connection>>::iterator reg_;  // set once before Start
  std::atomic<State> state_{State::kIdle};              // read by the acceptor (eviction)
  std::atomic<bool> evicting_{false};
  std::atomic<bool> cut_{false};  // shut down by the server while a worker owned it
  // Strand only (handed to and from the worker through the pool queue and post).
  bool closed_ = false;
  bool in_exchange_ = false;
  bool worker_owned_ = false;
  bool keep_alive_ = true;
  bool head_ = false;
};

// ---------------------------------------------------------------- HttpCore

void HttpCore::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](const ErrorCode& ec, tcp::socket socket) {
    OnAccept(ec, std::move(socket));
  });
}

void HttpCore::OnAccept(const ErrorCode& ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {
    // Out of descriptors: wait for connections to close instead of spinning.
    if (ec == net::error::no_descriptors || ec.value() == ENFILE) {
      DSV4_LOG_WARN("server: accept: {}; retrying in 50 ms", ec.message());
      retry_timer.expires_after(Ms(50));
      retry_timer.async_wait([this](const ErrorCode& e) {
        if (!e && acceptor.is_open()) Accept();
      });
      return;
    }
    Accept();
    return;
  }
  if (!draining) Admit(std::move(socket));
  Accept();
}

// At the connection limit the oldest connection without a request being
// handled (idle, mid-header, lingering; else mid-body) makes room, so slow
// or idle clients can never lock out a probe; when every connection is busy
// the new one gets a 503.
void HttpCore::Admit(tcp::socket socket) {
  ErrorCode ec;
  socket.set_option(tcp::no_delay(true), ec);
  std::shared_ptr<Connection> victim;
  bool full = false;
  {
    MutexLock lock(&mu);
    if (num_conns >= opt.max_connections) {
      full = true;
      for (int pass = 0; pass < 2 && !victim; ++pass) {
        for (const auto& weak : conns) {
          auto c = weak.lock();
          if (!c) continue;
          const auto st = c->state();
          const bool fits =
              pass == 0 ? (st == Connection::State::kIdle || st == Connection::State::kHeader ||
                           st == Connection::State::kLinger)
                        : st == Connection::State::kBody;
          if (fits && c->TryMarkEvicting()) {
            victim = std::move(c);
            break;
          }
        }
      }
    }
  }
  if (full && !victim) {
    const HttpResponse r = router.TransportError(
        503, fmt::format("every one of the {} connections is busy", opt.max_connections));
    const std::string out = SerializeHead(r, false, true, r.body.size()) + r.body;
    (void)::send(socket.native_handle(), out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    return;
  }
  if (victim) victim->CloseIfNotBusy();
  auto conn = std::make_shared<Connection>(*this, std::move(socket));
  {
    MutexLock lock(&mu);
    conns.push_back(conn);
    conn->set_registry_entry(std::prev(conns.end()));
    ++num_conns;
  }
  conn->Start();
}

void HttpCore::BeginExchange() {
  MutexLock lock(&mu);
  ++busy;
}

void HttpCore::EndExchange() {
  MutexLock lock(&mu);
  --busy;
  cv.SignalAll();
}

void HttpCore::Unregister(std::list<std::weak_ptr<Connection>>::iterator it) {
  MutexLock lock(&mu);
  conns.erase(it);
  --num_conns;
  cv.SignalAll();
}

void HttpCore::WaitClosed(Clock::time_point deadline) {
  MutexLock lock(&mu);
  cv.WaitUntil(&mu, deadline, [this]() REQUIRES(mu) { return num_conns == 0; });
}

std::vector<std::shared_ptr<Connection>> HttpCore::Connections() {
  MutexLock lock(&mu);
  std::vector<std::shared_ptr<Connection>> out;
  for (const auto& weak : conns) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

bool HttpCore::WaitIdle(std::optional<Clock::time_point> deadline) {
  MutexLock lock(&mu);
  const auto idle = [this]() REQUIRES(mu) { return busy == 0; };
  if (!deadline) {
    cv.Wait(&mu, idle);
    return true;
  }
  return cv.WaitUntil(&mu, *deadline, idle);
}

// ------------------------------------------------------------ HttpExchange

HttpExchange::HttpExchange(std::shared_ptr<Connection> conn, HttpRequest request)
    : conn_(std::move(conn)), request_(std::move(request)) {}

HttpExchange::~HttpExchange() {
  if (answered_) return;
  // Dropped without an answer, or a stream that failed: the connection ends.
  net::post(conn_->executor(), [c = conn_] {
    c->FromWorker();
    c->Close();
  });
}

void HttpExchange::Respond(HttpResponse response) {
  if (answered_) return;
  answered_ = true;
  net::post(conn_->executor(), [c = conn_, r = std::move(response)]() mutable {
    c->FromWorker();
    c->Reply(std::move(r), false, false);
  });
}

bool HttpExchange::StartStream(const HttpResponse& head) {
  close_after_ = conn_->CloseAfterResponse();
  stream_ok_ = conn_->WorkerSend(SerializeHead(head, /*chunked=*/true, close_after_, 0));
  return stream_ok_;
}

bool HttpExchange::WriteChunk(std::string_view data) {
  if (!stream_ok_) return false;
  if (data.empty()) return true;  // an empty chunk would end the body
  std::string chunk = fmt::format("{:x}\r\n", data.size());
  chunk.append(data.data(), data.size());
  chunk += "\r\n";
  stream_ok_ = conn_->WorkerSend(chunk);
  return stream_ok_;
}

void HttpExchange::EndStream() {
  if (answered_ || !stream_ok_) return;  // the destructor closes a failed stream
  stream_ok_ = conn_->WorkerSend("0\r\n\r\n");
  if (!stream_ok_) return;
  answered_ = true;
  net::post(conn_->executor(), [c = conn_, close = close_after_] {
    c->FromWorker();
    c->AfterResponse(true, close);
  });
}

bool HttpExchange::PeerClosed() { return conn_->PeerClosed(); }

// -------------------------------------------------------------- HttpServer

HttpServer::HttpServer(HttpTransportOptions options, HttpRouter& router)
    : core_(std::make_unique<HttpCore>(std::move(options), router)) {}

HttpServer::~HttpServer() { Stop(Ms(0), Ms(0), nullptr); }

Status HttpServer::Bind(int* port) {
  HttpCore& c = *core_;
  const auto& o = c.opt;
  ErrorCode ec;
  tcp::endpoint endpoint;
  const auto address = net::ip::make_address(o.host, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, static_cast<uint16_t>(o.port));
  } else {
    tcp::resolver resolver(c.ioc);
    auto found = resolver.resolve(o.host, std::to_string(o.port), ec);
    if (ec || found.empty()) {
      return IoError("cannot resolve --host {}: {}", o.host, ec ? ec.message() : "no address");
    }
    endpoint = found.begin()->endpoint();
  }
  const std::string where =
      fmt::format("{}:{}", o.host, o.port == 0 ? "<any>" : std::to_string(o.port));
  c.acceptor.open(endpoint.protocol(), ec);
  if (ec) return IoError("cannot open a socket for {}: {}", where, ec.message());
  // SO_REUSEADDR only lets a restart bind past TIME_WAIT; unlike SO_REUSEPORT
  // it never lets a second server listen on a port in use.
  c.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  c.acceptor.bind(endpoint, ec);
  if (ec) return IoError("cannot bind {}: {}", where, ec.message());
  c.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return IoError("cannot listen on {}: {}", where, ec.message());
  *port = c.acceptor.local_endpoint().port();
  net::post(c.acceptor.get_executor(), [&c] { c.Accept(); });
  return Status::Ok();
}

void HttpServer::Serve() {
  HttpCore& c = *core_;
  std::vector<std::thread> threads;
  for (int i = 1; i < c.opt.io_threads; ++i) threads.emplace_back([&c] { c.ioc.run(); });
  c.ioc.run();
  for (std::thread& t : threads) t.join();
}

void HttpServer::Stop(Ms drain, Ms grace, const std::function<void()>& on_drain_timeout) {
  HttpCore& c = *core_;
  {
    MutexLock lock(&c.mu);
    if (c.stop_called) return;
    c.stop_called = true;
  }
  c.draining = true;
  net::post(c.acceptor.get_executor(), [&c] {
    ErrorCode ec;
    c.acceptor.close(ec);
    c.retry_timer.cancel();
  });
  for (auto& conn : c.Connections()) conn->CloseIfNotBusy();
  std::optional<Clock::time_point> deadline;
  if (drain != Ms::max()) deadline = Clock::now() + drain;
  bool idle = c.WaitIdle(deadline);
  if (!idle) {
    if (on_drain_timeout) on_drain_timeout();
    idle = c.WaitIdle(Clock::now() + grace);
  }
  for (auto& conn : c.Connections()) conn->Cut();
  if (!idle) c.WaitIdle(Clock::now() + kCutWait);
  // The closes run on the I/O threads: let them happen before those stop.
  c.WaitClosed(Clock::now() + kCutWait);
  c.work.reset();
  c.ioc.stop();
  c.pool.Shutdown();
}

bool HttpServer::draining() const { return core_->draining; }

int64_t HttpServer::num_connections() const {
  MutexLock lock(&core_->mu);
  return core_->num_conns;
}

}  // namespace dsv4::server
