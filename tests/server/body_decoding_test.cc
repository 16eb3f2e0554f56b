#include "server/body_decoding.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace dsv4::server {
namespace {

// windowBits 15 = zlib, 15 + 16 = gzip, -15 = raw deflate.
std::string Pack(const std::string& plain, int window_bits) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, plain.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(BodyDecoding, IdentityGzipZlibAndRawDeflate) {
  const std::string plain = R"({"prompt":")" + std::string(5000, 'x') + R"("})";
  std::string body = plain;
  EXPECT_EQ(DecodeBody("", 1 << 20, &body).http_status, 0);
  EXPECT_EQ(DecodeBody(" Identity ", 1 << 20, &body).http_status, 0);
  EXPECT_EQ(body, plain);
  for (auto [coding, bits] : {std::pair{"gzip", 31}, {"deflate", 15}, {"deflate", -15}}) {
    body = Pack(plain, bits);
    const DecodeResult r = DecodeBody(coding, 1 << 20, &body);
    EXPECT_EQ(r.http_status, 0) << coding << " " << bits << " " << r.message;
    EXPECT_EQ(body, plain) << coding << " " << bits;
  }
  // Two layers, applied in order (decoded in reverse).
  body = Pack(Pack(plain, -15), 31);
  EXPECT_EQ(DecodeBody("deflate, GZIP", 1 << 20, &body).http_status, 0);
  EXPECT_EQ(body, plain);
}

TEST(BodyDecoding, DecodedSizeIsBounded) {
  const std::string plain(4 << 20, 'a');  // 4 MiB -> ~4 KiB packed
  std::string body = Pack(plain, 31);
  ASSERT_LT(body.size(), 64u << 10);
  DecodeResult r = DecodeBody("gzip", 64 << 10, &body);
  EXPECT_EQ(r.http_status, 413);
  EXPECT_EQ(r.message, "request body over 65536 bytes");
  EXPECT_TRUE(body.empty() || body.size() <= (64u << 10) + 1) << body.size();
  body = Pack(plain, 31);
  EXPECT_EQ(DecodeBody("gzip", 4 << 20, &body).http_status, 0);  // exactly at the bound
  EXPECT_EQ(body.size(), plain.size());
}

TEST(BodyDecoding, BadInputIs400Or415) {
  std::string body = "not compressed at all";
  EXPECT_EQ(DecodeBody("gzip", 1 << 20, &body).http_status, 400);
  body = Pack("{}", 31);
  body.resize(body.size() - 4);  // truncated
  EXPECT_EQ(DecodeBody("gzip", 1 << 20, &body).http_status, 400);
  body = Pack("{}", 31) + "trailing";
  EXPECT_EQ(DecodeBody("gzip", 1 << 20, &body).http_status, 400);
  body = "x";
  const DecodeResult r = DecodeBody("br", 1 << 20, &body);
  EXPECT_EQ(r.http_status, 415);
  EXPECT_NE(r.message.find("'br'"), std::string::npos) << r.message;
  EXPECT_EQ(DecodeBody("gzip, gzip, gzip", 1 << 20, &body).http_status, 415);
}

}  // namespace
}  // namespace dsv4::server
