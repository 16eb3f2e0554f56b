// Raw bytes from a client -> the HTTP transport (src/server/http_server.h)
// over a real loopback connection.  One server per process with small limits
// (1 KiB header, 4 KiB body) and an echo router; each input is sent on a new
// connection whose sending side is then closed.  Properties (docs/server.md
// "Transport", "Request bodies"):
//   - the server answers or closes within 5 s: no input holds a connection;
//   - what comes back is a sequence of whole HTTP/1.1 responses (interim 100,
//     then Content-Length or chunked framing) with a status the transport
//     may give (200 from the router, 404, 400/408/413/415/431 from the
//     transport, 500, 503), and every error has a JSON body;
//   - an echoed body is never over the body bound (after decoding);
//   - the connection is gone from the server within 2 s of the client's close.
// Coverage comes from Beast's parser, the body decoding and the connection
// state machine (dsv4_server is built with fuzzer instrumentation).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "server/http_server.h"
#include "tests/fuzz/text_fuzz_common.h"

namespace {

using dsv4::server::HttpExchange;
using dsv4::server::HttpRequest;
using dsv4::server::HttpResponse;
using dsv4::text::fuzz::Require;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxBody = 4096;

// GET /health on the I/O thread; POST /echo on a worker, answering the
// decoded body's size (X-Stream: 1 streams it as one chunk); else 404.
class EchoRouter : public dsv4::server::HttpRouter {
 public:
  std::optional<HttpResponse> Route(const HttpRequest& r) override {
    if (r.path == "/health") return HttpResponse{200, "application/json", "{}", {}};
    if (r.path == "/echo") return std::nullopt;
    return TransportError(404, "no such route");
  }
  void Handle(HttpExchange& ex) override {
    const std::string size = std::to_string(ex.request().body.size());
    if (ex.request().Header("X-Stream") == "1") {
      if (ex.StartStream(HttpResponse{200, "text/plain", "", {}}) && ex.WriteChunk(size)) {
        ex.EndStream();
      }
      return;
    }
    ex.Respond(HttpResponse{200, "text/plain", size, {}});
  }
  HttpResponse TransportError(int status, const std::string&) override {
    return HttpResponse{status, "application/json", R"({"error":{"message":"m"}})", {}};
  }
};

struct Server {
  EchoRouter router;
  std::unique_ptr<dsv4::server::HttpServer> http;
  std::thread thread;
  int port = 0;
};

Server& TheServer() {
  static Server* s = [] {
    auto* srv = new Server;
    dsv4::server::HttpTransportOptions o;
    o.max_header_bytes = 1024;
    o.max_body_bytes = kMaxBody;
    o.worker_threads = 4;
    srv->http = std::make_unique<dsv4::server::HttpServer>(o, srv->router);
    Require(srv->http->Bind(&srv->port).ok(), "bind");
    srv->thread = std::thread([srv] { srv->http->Serve(); });
    srv->thread.detach();  // runs for the life of the process
    return srv;
  }();
  return *s;
}

bool Allowed(int status) {
  switch (status) {
    case 100:
    case 200:
    case 400:
    case 404:
    case 408:
    case 413:
    case 415:
    case 431:
    case 500:
    case 503:
      return true;
    default:
      return false;
  }
}

// Checks the responses in `text`.  `head` (a HEAD request was sent, whose
// answers carry a Content-Length but no body): only the status lines.
void CheckResponses(std::string_view text, bool head) {
  size_t pos = 0;
  while (pos < text.size()) {
    Require(text.substr(pos, 9) == "HTTP/1.1 " && text.size() >= pos + 12, "bad status line");
    const int status = std::atoi(std::string(text.substr(pos + 9, 3)).c_str());
    Require(Allowed(status), "status the transport does not give");
    const size_t end = text.find("\r\n\r\n", pos);
    Require(end != std::string_view::npos, "response header not terminated");
    const std::string_view header = text.substr(pos, end + 4 - pos);
    pos = end + 4;
    if (status == 100) continue;
    if (head) {  // resynchronise on the next status line
      const size_t next = text.find("HTTP/1.1 ", pos);
      pos = next == std::string_view::npos ? text.size() : next;
      continue;
    }
    std::string body;
    if (header.find("Transfer-Encoding: chunked\r\n") != std::string_view::npos) {
      for (;;) {
        const size_t line_end = text.find("\r\n", pos);
        Require(line_end != std::string_view::npos, "chunk size line");
        const size_t n =
            std::strtoul(std::string(text.substr(pos, line_end - pos)).c_str(), nullptr, 16);
        pos = line_end + 2;
        Require(text.size() >= pos + n + 2, "chunk cut short");
        body.append(text.substr(pos, n));
        pos += n + 2;
        if (n == 0) break;
      }
    } else {
      const size_t cl = header.find("Content-Length: ");
      Require(cl != std::string_view::npos, "neither Content-Length nor chunked");
      const size_t n = std::strtoul(std::string(header.substr(cl + 16)).c_str(), nullptr, 10);
      Require(text.size() >= pos + n, "body cut short");
      body = std::string(text.substr(pos, n));
      pos += n;
    }
    if (status == 200 && body != "{}") {
      Require(std::strtoll(body.c_str(), nullptr, 10) <= kMaxBody, "body over the bound");
    }
    if (status >= 400) Require(body.rfind("{\"error\":", 0) == 0, "error without JSON body");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& srv = TheServer();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  Require(fd >= 0, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(srv.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Require(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
  // Send what the server takes (it may answer and stop reading early).
  std::string_view out(reinterpret_cast<const char*>(data), size);
  std::string in;
  char buf[8192];
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  bool sent_all = out.empty();
  bool eof = false;
  if (sent_all) ::shutdown(fd, SHUT_WR);
  while (!eof && Clock::now() < deadline) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent_all ? 0 : POLLOUT)), 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) in.append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) eof = true;
    }
    if (!sent_all && (p.revents & POLLOUT)) {
      const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) out.remove_prefix(static_cast<size_t>(n));
      if (out.empty() || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        sent_all = true;
        ::shutdown(fd, SHUT_WR);
      }
    }
  }
  ::close(fd);
  Require(eof, "the server neither answered nor closed within 5 s");
  const bool head = std::string_view(reinterpret_cast<const char*>(data), size).find("HEAD") !=
                    std::string_view::npos;
  CheckResponses(in, head);
  const auto closed_by = Clock::now() + std::chrono::seconds(2);
  while (srv.http->num_connections() > 0 && Clock::now() < closed_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Require(srv.http->num_connections() == 0, "a connection outlived its client by 2 s");
  return 0;
}
