// Configuration of the OpenAI-compatible server (everything that is not an
// engine flag; `dsv4 serve` fills it from the command line).
#pragma once

#include <cstdint>
#include <string>

#include "engine/sampling_params.h"

namespace dsv4::server {

// What one request may ask for (docs/server.md "Input limits").  Every bound
// is checked before the work it would cause; crossing one is a 400 naming the
// field.  Bytes are bounded by ServerOptions::max_body_bytes.
struct RequestLimits {
  // JSON structure, for the body and for tool-call `arguments` strings.  The
  // depth bounds every recursive walk over the value (nlohmann's copy, dump
  // and == recurse); 128 is serde_json's default and far above any schema.
  int64_t max_json_depth = 128;
  int64_t max_json_object_members = 10000;  // per object (logit_bias, schemas)
  // Per array: 2^20, so a full 1M-token context fits as token ids.
  int64_t max_json_array_elements = int64_t{1} << 20;
  int64_t max_messages = 10000;
  int64_t max_tools = 1000;
  // Stop strings are matched against the held-back text after every token
  // (work ~ count x length^2 per token in the worst case).
  int64_t max_stop_strings = 16;
  int64_t max_stop_bytes = 1000;
  int64_t max_stop_token_ids = 1000;  // scanned per token on the engine thread
  // prompts x n: each choice is one engine request with its own decoder.
  int64_t max_choices = 1024;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (tests)
  std::string served_model_name = "dsv4";
  std::string api_key;                  // empty = no authentication
  int64_t max_body_bytes = 8 << 20;     // larger request bodies get 413 (decoded size too)
  int64_t max_header_bytes = 32 << 10;  // request line + header fields; beyond: 431
  // From a request's first byte to the end of its header; a client slower
  // than that gets a 408 and is disconnected (docs/server.md "Transport").
  double header_timeout_seconds = 10;
  // From the end of a request's header to the end of its body, however
  // steadily the client sends: a body not complete by then gets a 408.
  double body_timeout_seconds = 60;
  // Longest silence while reading a body (then a 408), writing a response
  // the client does not read, or waiting for the next request on a
  // keep-alive connection (both: closed without an answer).
  double read_timeout_seconds = 30;
  // Open connections at most; at the limit the oldest one without a request
  // being handled makes room (a 503 when every one is busy).
  int64_t max_connections = 1024;
  int num_io_threads = 2;        // accept, read requests, answer /health /v1/models /metrics
  int64_t max_model_len = 4096;  // prompt + max_tokens per request
  // Requests admitted at once (running + queued in the engine + being
  // encoded); beyond it new requests get 429 with Retry-After.
  int64_t max_concurrent_requests = 512;
  // Workers for generation, tokenize and detokenize (a request in flight,
  // streaming or not, holds one); started on demand.
  int num_http_threads = 0;  // 0 = max_concurrent_requests + 8
  int32_t eos_token_id = 1;
  bool default_thinking = false;  // chat mode unless the request asks for thinking
  // What a request that does not set a sampling field gets (temperature,
  // top_p, top_k, min_p, repetition_penalty): dsv4's SamplingParams{} unless
  // --generation-config took the model's generation_config.json
  // (docs/sampling.md "Generation config").
  engine::SamplingParams default_sampling;
  // Chat requests without max_tokens: min(this, what is left of the
  // context); 0 = what is left (generation_config.json's max_new_tokens).
  int64_t default_max_tokens = 0;
  int retry_after_seconds = 1;
  // --profile: POST /start_profile and /stop_profile exist (404 otherwise)
  // and write traces of `profile_levels` under `profile_output`
  // (docs/profiling.md).
  bool profile = false;
  std::string profile_output = "./profile_out";
  uint32_t profile_levels = 0;
  double keepalive_seconds = 0.5;  // idle SSE streams probe the socket this often
  RequestLimits limits;
};

}  // namespace dsv4::server
