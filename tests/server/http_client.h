// A small blocking HTTP/1.1 client over plain sockets for the server tests.
// It replaced Debian's cpp-httplib client, a prebuilt library that
// ThreadSanitizer cannot see into (so server_http_test could not run under
// TSan, docs/server.md "ThreadSanitizer").  One connection per request with
// `Connection: close`; the response body is de-chunked.  Every wait for the
// server is bounded by the read timeout; a request that fails or times out
// returns nullopt, as a client that gave up.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsv4::server::testing {

using ClientHeaders = std::vector<std::pair<std::string, std::string>>;

struct ClientResponse {
  int status = 0;
  ClientHeaders headers;
  std::string body;

  // The first header named `name` (case-insensitive), or "".
  std::string Header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n.size() == name.size() && strncasecmp(n.data(), name.data(), n.size()) == 0) return v;
    }
    return "";
  }
};

class TestClient {
 public:
  // Called with each piece of the body as it arrives; false closes the
  // connection (the client goes away mid-response).
  using BodySink = std::function<bool(std::string_view)>;

  explicit TestClient(int port, std::chrono::milliseconds read_timeout = std::chrono::seconds(30))
      : port_(port), read_timeout_(read_timeout) {}

  void set_read_timeout(std::chrono::milliseconds t) { read_timeout_ = t; }

  std::optional<ClientResponse> Get(const std::string& path,
                                    const ClientHeaders& headers = {}) const {
    return Send("GET", path, "", "", headers, nullptr);
  }
  std::optional<ClientResponse> Post(const std::string& path, const std::string& body,
                                     const std::string& content_type = "application/json",
                                     const ClientHeaders& headers = {},
                                     const BodySink& sink = nullptr) const {
    return Send("POST", path, body, content_type, headers, sink);
  }

 private:
  // Closes the socket on every path out.
  class Socket {
   public:
    explicit Socket(int fd) : fd_(fd) {}
    ~Socket() {
      if (fd_ >= 0) ::close(fd_);
    }
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    int fd() const { return fd_; }

   private:
    int fd_;
  };

  std::optional<ClientResponse> Send(const std::string& method, const std::string& path,
                                     const std::string& body, const std::string& content_type,
                                     const ClientHeaders& headers, const BodySink& sink) const {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (s.fd() < 0) return std::nullopt;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return std::nullopt;  // refused: the server is gone or stopping
    }
    std::string out = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
    for (const auto& [n, v] : headers) out += n + ": " + v + "\r\n";
    if (method != "GET") {
      if (!content_type.empty()) out += "Content-Type: " + content_type + "\r\n";
      out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    out += "\r\n" + body;
    for (size_t off = 0; off < out.size();) {
      const ssize_t n = ::send(s.fd(), out.data() + off, out.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      // The server may answer (413, 431) and close before the body is out.
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    Reader in{s.fd(), read_timeout_, "", false};
    return ReadResponse(in, method == "HEAD", sink);
  }

  // Buffered reads from the socket; each wait bounded by `timeout`.
  struct Reader {
    int fd;
    std::chrono::milliseconds timeout;
    std::string buf;
    bool eof = false;

    // Reads more; false on EOF, error or timeout.
    bool Fill() {
      if (eof) return false;
      pollfd p{fd, POLLIN, 0};
      int r;
      do {
        r = ::poll(&p, 1, static_cast<int>(timeout.count()));
      } while (r < 0 && errno == EINTR);
      if (r <= 0) return false;
      char chunk[16384];
      const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        eof = true;
        return false;
      }
      buf.append(chunk, static_cast<size_t>(n));
      return true;
    }
    // The next line without its CRLF.
    std::optional<std::string> Line() {
      size_t end;
      while ((end = buf.find("\r\n")) == std::string::npos) {
        if (!Fill()) return std::nullopt;
      }
      std::string line = buf.substr(0, end);
      buf.erase(0, end + 2);
      return line;
    }
    // Exactly n bytes, handed to `take` as they arrive; false if `take`
    // said stop or the connection ended first.
    bool Bytes(size_t n, const std::function<bool(std::string_view)>& take) {
      while (n > 0) {
        if (buf.empty() && !Fill()) return false;
        const size_t k = std::min(n, buf.size());
        const bool more = take(std::string_view(buf).substr(0, k));
        buf.erase(0, k);
        n -= k;
        if (!more) return false;
      }
      return true;
    }
  };

  static std::optional<ClientResponse> ReadResponse(Reader& in, bool head, const BodySink& sink) {
    ClientResponse r;
    auto status_line = in.Line();
    if (!status_line || status_line->rfind("HTTP/1.", 0) != 0 || status_line->size() < 12) {
      return std::nullopt;
    }
    r.status = std::atoi(status_line->c_str() + 9);
    for (;;) {
      auto line = in.Line();
      if (!line) return std::nullopt;
      if (line->empty()) break;
      const size_t colon = line->find(':');
      if (colon == std::string::npos) return std::nullopt;
      std::string value = line->substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers.emplace_back(line->substr(0, colon), value);
    }
    bool stopped = false;
    auto take = [&](std::string_view piece) {
      r.body.append(piece);
      if (sink && !sink(piece)) stopped = true;
      return !stopped;
    };
    if (head || r.status == 204 || r.status == 304) return r;
    if (r.Header("Transfer-Encoding") == "chunked") {
      for (;;) {
        auto size_line = in.Line();
        if (!size_line) return std::nullopt;
        const size_t size = std::strtoul(size_line->c_str(), nullptr, 16);
        if (size == 0) break;
        if (!in.Bytes(size, take) || !in.Line()) return std::nullopt;
      }
      if (!in.Line()) return std::nullopt;  // the CRLF after the last chunk
      return r;
    }
    const std::string length = r.Header("Content-Length");
    if (!length.empty()) {
      if (!in.Bytes(std::strtoull(length.c_str(), nullptr, 10), take)) return std::nullopt;
      return r;
    }
    do {  // neither: the body ends with the connection
      const bool more = take(in.buf);
      in.buf.clear();
      if (!more) return std::nullopt;
    } while (in.Fill());
    if (!in.eof) return std::nullopt;  // timed out
    return r;
  }

  int port_;
  std::chrono::milliseconds read_timeout_;
};

}  // namespace dsv4::server::testing
