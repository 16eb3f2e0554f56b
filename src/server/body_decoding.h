// Content-Encoding of request bodies: identity, gzip and deflate (zlib or
// raw), decoded with the decoded size bounded before it is allocated, so
// --max-request-bytes holds for what the handler sees (8 MiB of deflate can
// otherwise expand to ~8 GiB).
#pragma once

#include <cstdint>
#include <string>

namespace dsv4::server {

struct DecodeResult {
  int http_status = 0;  // 0 = ok; 413 over the limit, 415 unknown coding, 400 corrupt
  std::string message;
};

// Decodes `body` in place per `content_encoding` (comma-separated codings,
// applied in order, so decoded in reverse; case-insensitive; empty = identity).
DecodeResult DecodeBody(const std::string& content_encoding, int64_t max_bytes, std::string* body);

}  // namespace dsv4::server
