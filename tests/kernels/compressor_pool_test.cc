// Compressor pooling (kernels/compressor.h) against its scalar reference over
// row counts and widths (channel-block tails included), with -inf scores (the
// ring's never-written rows) and rows whose exponentials underflow: bitwise.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/compressor.h"
#include "kernels/ref/compressor_ref.h"

namespace dsv4::kernels {
namespace {

TEST(CompressorPoolTest, SoftmaxPoolMatchesReferenceBitwise) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 3.0f);
  int compared = 0;
  for (int64_t rows : {1, 4, 7, 8, 128, 256}) {
    for (int64_t d : {1, 15, 16, 17, 128, 512}) {
      for (int flavour = 0; flavour < 3; ++flavour) {
        std::vector<float> kv(rows * d), score(rows * d);
        for (float& v : kv) v = g(rng);
        for (size_t i = 0; i < score.size(); ++i) {
          score[i] = flavour == 1 ? 40.0f * g(rng) : g(rng);  // 1: most weights underflow
          // 2: some rows masked out per channel, never a whole channel.
          if (flavour == 2 && i >= static_cast<size_t>(d) && rng() % 3 == 0) {
            score[i] = -std::numeric_limits<float>::infinity();
          }
        }
        std::vector<const float*> kv_rows(rows), score_rows(rows);
        for (int64_t j = 0; j < rows; ++j) {
          kv_rows[j] = kv.data() + j * d;
          score_rows[j] = score.data() + j * d;
        }
        std::vector<bf16> got(d), want(d);
        SoftmaxPool(kv_rows.data(), score_rows.data(), rows, d, got.data());
        ref::SoftmaxPool(kv_rows.data(), score_rows.data(), rows, d, want.data());
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), d * sizeof(bf16)))
            << "rows " << rows << " d " << d << " flavour " << flavour;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 108);
}

// One row: its softmax weight is exactly 1, so the entry is the row rounded.
TEST(CompressorPoolTest, SingleRowIsTheRowRounded) {
  const std::vector<float> kv = {1.0f, -2.5f, 3.0f + 1.0f / 1024};
  const std::vector<float> score = {7.0f, -100.0f, 0.0f};
  const float* k = kv.data();
  const float* s = score.data();
  std::vector<bf16> out(3);
  SoftmaxPool(&k, &s, 1, 3, out.data());
  for (int c = 0; c < 3; ++c) EXPECT_EQ(out[c].bits, F32ToBf16(kv[c]).bits) << c;
}

}  // namespace
}  // namespace dsv4::kernels
