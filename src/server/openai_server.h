// The OpenAI-compatible HTTP server over an AsyncEngine (docs/server.md):
//   GET  /health  /v1/models  /metrics
//   POST /v1/chat/completions  /v1/completions  /tokenize  /detokenize
//   POST /start_profile  /stop_profile   (only with ServerOptions::profile)
// Transport: http_server.h (Asio I/O threads read requests and answer the
// cheap routes; generation, tokenize and detokenize run on a bounded worker
// pool).  A request's chat encoding, detokenization, output parsing and
// JSON/SSE formatting run on its worker thread, so the engine thread only
// ever sees token ids.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/async_engine.h"
#include "server/server_options.h"
#include "text/tokenizer.h"

namespace dsv4::server {

class OpenAiServer {
 public:
  // REQUIRES: `engine` and `tokenizer` outlive the server.
  OpenAiServer(engine::AsyncEngine& engine, const text::Tokenizer& tokenizer,
               ServerOptions options);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds the listening socket (options.port 0 picks a free port).
  Status Bind();
  int port() const { return port_; }
  // Serves until Stop(); blocks the calling thread.
  void Serve();
  // Graceful stop: stops accepting and closes idle and mid-header
  // connections at once; new requests get 503; requests in flight get up to
  // `drain` to finish (streams keep streaming; milliseconds::max() = no
  // limit), then are aborted (finish_reason "abort", answered within
  // kAbortGrace), then cut.  Serve() returns when Stop does.
  void Stop(std::chrono::milliseconds drain);
  static constexpr std::chrono::milliseconds kAbortGrace{2000};

  int64_t num_in_flight() const { return in_flight_.load(); }

 private:
  class Impl;
  std::atomic<int64_t> in_flight_{0};  // before impl_, which refers to it
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
