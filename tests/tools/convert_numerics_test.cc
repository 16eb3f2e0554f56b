// The reference converter's numeric and selection vectors (docs/convert.md
// "What is converted (same rules as the reference)") and SHA-256 known answers.
#include "tools/convert_numerics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/sha256.h"

namespace dsv4::tools {
namespace {

constexpr uint8_t kE8M0One = 127;  // 2^0

TEST(ConvertNumerics, Mxfp4LowNibbleFirstTimesScale) {
  const uint8_t packed[2] = {0x21, static_cast<uint8_t>(-0x68)};
  const uint8_t scale[1] = {kE8M0One + 1};  // 2
  float out[4];
  DequantFp4Rows(packed, scale, 4, 1, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_TRUE(std::signbit(out[2]));  // -0
  EXPECT_EQ(out[3], -1.0f);
}

TEST(ConvertNumerics, Fp8BlockScaleExpandsAndCrops) {
  const int64_t n = 129;
  const std::vector<uint8_t> ones(n * n, 0x38);                                    // e4m3 1.0
  const uint8_t scales[4] = {kE8M0One, kE8M0One + 1, kE8M0One + 2, kE8M0One + 3};  // 1 2 / 4 8
  std::vector<float> out(n * n);
  DequantFp8Rows(ones.data(), scales, n, 0, n, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[127], 1.0f);
  EXPECT_EQ(out[128], 2.0f);
  EXPECT_EQ(out[128 * n], 4.0f);
  EXPECT_EQ(out[n * n - 1], 8.0f);
  // Streaming from row 128 alone gives the same last row.
  std::vector<float> last(n);
  DequantFp8Rows(ones.data() + 128 * n, scales, n, 128, 129, last.data());
  EXPECT_EQ(last[0], 4.0f);
  EXPECT_EQ(last[128], 8.0f);
}

TEST(ConvertNumerics, QuantizePerRowRoundsHalfToEven) {
  const float rows[2][3] = {{0, 1, -2}, {0.5f, -0.5f, 0.25f}};
  const int8_t want[2][3] = {{0, 64, -127}, {127, -127, 64}};  // 63.5 -> 64
  const float want_scale[2] = {2.0f / 127.0f, 0.5f / 127.0f};
  for (int r = 0; r < 2; ++r) {
    int8_t q[3];
    EXPECT_EQ(QuantizeRowInt8(rows[r], 3, q), want_scale[r]);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(q[i], want[r][i]) << r << "," << i;
  }
}

TEST(ConvertNumerics, QuantizeClampsTinyRowsAndNeverEmitsMinus128) {
  const float zeros[4] = {0, 0, 0, 0};
  int8_t q[4];
  EXPECT_EQ(QuantizeRowInt8(zeros, 4, q), 1e-4f / 127.0f);
  for (int8_t v : q) EXPECT_EQ(v, 0);
  const float big[2] = {-3, 3};
  QuantizeRowInt8(big, 2, q);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[1], 127);
}

TEST(ConvertNumerics, SelectionFollowsTheReference) {
  const std::vector<int64_t> ratios = {0, 0, 4, 128, 0};  // 4 main layers + 1 MTP
  EXPECT_TRUE(IsInt8Module("layers.0.attn.wq_b", ratios, 4));
  EXPECT_TRUE(IsInt8Module("layers.1.attn.wo_b", ratios, 4));
  EXPECT_TRUE(IsInt8Module("layers.0.ffn.experts.17.w2", ratios, 4));
  EXPECT_TRUE(IsInt8Module("layers.3.ffn.shared_experts.w3", ratios, 4));
  EXPECT_TRUE(IsInt8Module("layers.2.attn.indexer.wq_b", ratios, 4));
  EXPECT_TRUE(IsInt8Module("mtp.0.e_proj", ratios, 4));
  EXPECT_TRUE(IsInt8Module("mtp.0.h_proj", ratios, 4));
  EXPECT_TRUE(IsInt8Module("mtp.0.attn.wq_b", ratios, 4));
  EXPECT_TRUE(IsInt8Module("mtp.0.ffn.experts.3.w1", ratios, 4));
  EXPECT_FALSE(IsInt8Module("layers.3.attn.indexer.wq_b", ratios, 4));
  EXPECT_FALSE(IsInt8Module("layers.0.attn.wq_a", ratios, 4));
  EXPECT_FALSE(IsInt8Module("layers.0.attn.wkv", ratios, 4));
  EXPECT_FALSE(IsInt8Module("layers.0.attn.wo_a", ratios, 4));
  EXPECT_FALSE(IsInt8Module("layers.2.attn.indexer.weights_proj", ratios, 4));
  EXPECT_FALSE(IsInt8Module("layers.0.ffn.experts.x.w1", ratios, 4));
  EXPECT_FALSE(IsInt8Module("layers.0.ffn.experts.1.w4", ratios, 4));
  EXPECT_FALSE(IsInt8Module("layers.9.attn.wq_b", ratios, 4));
  EXPECT_FALSE(IsInt8Module("head", ratios, 4));
}

class Sha256Test : public ::testing::TestWithParam<bool> {};

TEST_P(Sha256Test, KnownAnswers) {
  if (GetParam() && !Sha256::CpuHasShaNi()) GTEST_SKIP() << "no SHA extensions";
  Sha256 empty(GetParam());
  EXPECT_EQ(empty.FinishHex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 abc(GetParam());
  abc.Update("abc", 3);
  EXPECT_EQ(abc.FinishHex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 two_blocks(GetParam());  // 448-bit message: padding spills into a second block
  const std::string m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  two_blocks.Update(m.data(), m.size());
  EXPECT_EQ(two_blocks.FinishHex(),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // 1,000,000 'a' fed in odd pieces (crosses the 64-byte buffer boundaries).
  Sha256 million(GetParam());
  const std::string piece(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    const size_t n = std::min(left, piece.size());
    million.Update(piece.data(), n);
    left -= n;
  }
  EXPECT_EQ(million.FinishHex(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, ShaExtensionsEqualPortableCode) {
  if (!Sha256::CpuHasShaNi()) GTEST_SKIP() << "no SHA extensions";
  std::string data(100003, '\0');
  uint32_t x = 1;
  for (char& c : data) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  for (size_t len : {size_t{0}, size_t{55}, size_t{64}, size_t{65}, size_t{4096}, data.size()}) {
    Sha256 fast(true), slow(false);
    fast.Update(data.data(), len);
    slow.Update(data.data(), len);
    EXPECT_EQ(fast.FinishHex(), slow.FinishHex()) << len;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Sha256Test, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "ShaNi" : "Portable"; });

}  // namespace
}  // namespace dsv4::tools
