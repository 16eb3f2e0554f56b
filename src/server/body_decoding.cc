#include "server/body_decoding.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <vector>

namespace dsv4::server {
namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string out = s.substr(b, e - b);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// window_bits: 15 + 32 detects a zlib or gzip header; -15 is raw deflate.
DecodeResult Inflate(const std::string& in, int window_bits, int64_t max_bytes, std::string* out) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) return {500, "cannot start zlib"};
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  out->clear();
  char buf[64 << 10];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    const size_t n = sizeof(buf) - z.avail_out;
    if (static_cast<int64_t>(out->size() + n) > max_bytes) {
      inflateEnd(&z);
      out->clear();
      return {413, fmt::format("request body over {} bytes", max_bytes)};
    }
    out->append(buf, n);
    if (rc == Z_OK && n == 0 && z.avail_in == 0) break;  // truncated input
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END || z.avail_in != 0) {
    out->clear();
    return {400, "the request body is not valid for its Content-Encoding"};
  }
  return {};
}

}  // namespace

DecodeResult DecodeBody(const std::string& content_encoding, int64_t max_bytes, std::string* body) {
  std::vector<std::string> codings;
  size_t start = 0;
  while (start <= content_encoding.size()) {
    size_t comma = content_encoding.find(',', start);
    if (comma == std::string::npos) comma = content_encoding.size();
    const std::string c = Trim(content_encoding.substr(start, comma - start));
    if (!c.empty() && c != "identity") codings.push_back(c);
    start = comma + 1;
  }
  // At most two codings: a stack of gzip layers multiplies the work per byte.
  if (codings.size() > 2) return {415, "more than two Content-Encoding codings"};
  for (auto it = codings.rbegin(); it != codings.rend(); ++it) {
    int bits = 0;
    if (*it == "gzip" || *it == "x-gzip") {
      bits = 15 + 16;
    } else if (*it == "deflate") {
      // RFC 9110 says zlib format; some clients send raw deflate.
      const auto b0 = body->empty() ? 0u : static_cast<unsigned char>((*body)[0]);
      const auto b1 = body->size() < 2 ? 0u : static_cast<unsigned char>((*body)[1]);
      bits = body->size() >= 2 && (b0 & 0x0f) == 8 && ((b0 << 8) | b1) % 31 == 0 ? 15 : -15;
    } else {
      return {415, fmt::format("unsupported Content-Encoding '{}' (gzip, deflate, identity)", *it)};
    }
    std::string decoded;
    DecodeResult r = Inflate(*body, bits, max_bytes, &decoded);
    if (r.http_status != 0) return r;
    body->swap(decoded);
  }
  return {};
}

}  // namespace dsv4::server
