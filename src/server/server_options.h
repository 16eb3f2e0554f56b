// Configuration of the OpenAI-compatible server (everything that is not an
// engine flag; `dsv4 serve` fills it from the command line).
#pragma once

#include <cstdint>
#include <string>

namespace dsv4::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (tests)
  std::string served_model_name = "dsv4";
  std::string api_key;               // empty = no authentication
  int64_t max_body_bytes = 8 << 20;  // larger request bodies get 413
  int64_t max_model_len = 4096;      // prompt + max_tokens per request
  // Requests admitted at once (running + queued in the engine + being
  // encoded); beyond it new requests get 429 with Retry-After.
  int64_t max_concurrent_requests = 512;
  int num_http_threads = 0;  // 0 = max_concurrent_requests + 8 (SSE holds a thread)
  int32_t eos_token_id = 1;
  bool default_thinking = false;  // chat mode unless the request asks for thinking
  int retry_after_seconds = 1;
  double keepalive_seconds = 0.5;  // idle SSE streams probe the socket this often
};

}  // namespace dsv4::server
