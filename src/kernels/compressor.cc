#include "kernels/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/logging.h"

namespace dsv4::kernels {

namespace {

// Channels per pass: every channel is independent, so blocking them changes
// no arithmetic, and a block's temporaries (16 KB of exponentials at the row
// limit) stay on the stack and in L1 instead of a [rows, d] scratch buffer.
constexpr int64_t kChannels = 16;

// Width is a compile-time constant for full blocks so the per-channel loops
// vectorize (only the max, sums and products: exp stays the libm call).
template <int64_t kWidth>
void PoolChannels(const float* const* kv_rows, const float* const* score_rows, int64_t rows,
                  int64_t c0, int64_t runtime_width, bf16* out) {
  const int64_t width = kWidth > 0 ? kWidth : runtime_width;
  float mx[kChannels];
  float inv[kChannels];
  float acc[kChannels];
  float e[kMaxPoolRows][kChannels];
  std::fill_n(mx, width, -std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < rows; ++j) {
    const float* s = score_rows[j] + c0;
    for (int64_t c = 0; c < width; ++c) mx[c] = std::max(mx[c], s[c]);
  }
  float sum[kChannels];
  std::fill_n(sum, width, 0.0f);
  for (int64_t j = 0; j < rows; ++j) {
    const float* s = score_rows[j] + c0;
    for (int64_t c = 0; c < width; ++c) {
      e[j][c] = std::exp(s[c] - mx[c]);
      sum[c] += e[j][c];
    }
  }
  for (int64_t c = 0; c < width; ++c) inv[c] = 1.0f / sum[c];
  std::fill_n(acc, width, 0.0f);
  for (int64_t j = 0; j < rows; ++j) {
    const float* v = kv_rows[j] + c0;
    for (int64_t c = 0; c < width; ++c) acc[c] += v[c] * (e[j][c] * inv[c]);
  }
  for (int64_t c = 0; c < width; ++c) out[c0 + c] = F32ToBf16(acc[c]);
}

}  // namespace

void SoftmaxPool(const float* const* kv_rows, const float* const* score_rows, int64_t rows,
                 int64_t d, bf16* out) {
  DSV4_CHECK(rows >= 1 && rows <= kMaxPoolRows);
  int64_t c0 = 0;
  for (; c0 + kChannels <= d; c0 += kChannels) {
    PoolChannels<kChannels>(kv_rows, score_rows, rows, c0, kChannels, out);
  }
  if (c0 < d) PoolChannels<0>(kv_rows, score_rows, rows, c0, d - c0, out);
}

}  // namespace dsv4::kernels
