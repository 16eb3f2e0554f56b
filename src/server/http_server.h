// The HTTP/1.1 transport of the OpenAI server (docs/server.md "Transport"):
// Boost.Beast parsing over Boost.Asio sockets, knowing nothing of the API.
//
// I/O threads own accept, request reading and the writing of whole
// responses.  Every wait on a client has a deadline (idle keep-alive, header,
// whole body, each body read, write; a request not read in time gets a 408),
// a request's header and body are bounded before they are
// buffered, and a connection that waits on its client costs no thread.  The
// router answers cheap requests on the I/O thread; the others (they may block
// on the engine) run on a bounded, lazily grown worker pool and answer
// through an HttpExchange, either whole or as a chunked stream.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dsv4::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string target;  // path and query
  std::string path;    // target up to '?'
  HttpHeaders headers;
  std::string body;  // after Content-Encoding decoding

  // The first header named `name` (case-insensitive), or "".
  std::string Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  HttpHeaders headers;  // extra headers (Retry-After, Cache-Control, ...)
};

struct HttpTransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;                                     // 0 = any free port
  int64_t max_header_bytes = 32 << 10;              // request line + fields; beyond: 431
  int64_t max_body_bytes = 8 << 20;                 // on the wire and decoded; beyond: 413
  std::chrono::milliseconds header_timeout{10000};  // first byte -> end of the header
  std::chrono::milliseconds body_timeout{60000};    // end of the header -> end of the body
  // Longest wait for the next byte of a body, for a response write to make
  // progress, and for the first byte of a request on an idle connection.
  std::chrono::milliseconds read_timeout{30000};
  int64_t max_connections = 1024;
  int io_threads = 2;
  int worker_threads = 64;  // most handlers running at once
};

class Connection;
class HttpCore;

// One request handed to a worker.  The handler answers exactly once: Respond,
// or StartStream, WriteChunk..., EndStream.  An exchange dropped without an
// answer (or after a failed write) closes its connection.
class HttpExchange {
 public:
  HttpExchange(std::shared_ptr<Connection> conn, HttpRequest request);
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const HttpRequest& request() const { return request_; }
  // Queues the whole response for the I/O thread and returns at once.
  void Respond(HttpResponse response);
  // Chunked response, written from the calling thread; false once the client
  // is gone, the write deadline passed or the server cut the connection.
  bool StartStream(const HttpResponse& head);
  bool WriteChunk(std::string_view data);
  void EndStream();
  // True once the client closed or reset its side.  Never blocks or reads.
  bool PeerClosed();
  bool answered() const { return answered_; }

 private:
  std::shared_ptr<Connection> conn_;
  HttpRequest request_;
  bool answered_ = false;
  bool stream_ok_ = true;
  bool close_after_ = false;
};

class HttpRouter {
 public:
  virtual ~HttpRouter() = default;
  // On an I/O thread, must not block: the response, or nullopt to run
  // Handle on a worker.
  virtual std::optional<HttpResponse> Route(const HttpRequest& request) = 0;
  virtual void Handle(HttpExchange& exchange) = 0;
  // The body of an error the transport answers itself (400, 408, 413, 415,
  // 431, 503).
  virtual HttpResponse TransportError(int status, const std::string& message) = 0;
};

class HttpServer {
 public:
  // REQUIRES: `router` outlives the server.
  HttpServer(HttpTransportOptions options, HttpRouter& router);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds exclusively (no SO_REUSEPORT: a port in use is an error).
  Status Bind(int* port);
  // Runs the I/O threads (the caller is one of them) until Stop finishes.
  void Serve();
  // Stops accepting and closes every connection without a request being
  // handled, at once; waits up to `drain` (milliseconds::max() = no limit)
  // for the requests being handled, calls `on_drain_timeout` if some are
  // left, waits up to `grace` more, then cuts the connections still open.
  // Returns when the I/O threads and workers are done.
  void Stop(std::chrono::milliseconds drain, std::chrono::milliseconds grace,
            const std::function<void()>& on_drain_timeout);
  bool draining() const;
  int64_t num_connections() const;

 private:
  std::unique_ptr<HttpCore> core_;
};

}  // namespace dsv4::server
