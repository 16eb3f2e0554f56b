#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/ref/rope_ref.h"

namespace dsv4::kernels {

namespace {

// Heads rotated per task of ApplyRope: a few dozen microseconds of work, so
// a dispatch pays for itself (one decode token's 64 heads stay inline).
constexpr int64_t kMinRotationsPerTask = 512;

// The reference's find_correction_dim, in double (Python math).
double CorrectionDim(double num_rotations, int64_t rope_dim, double base, double max_pos) {
  return static_cast<double>(rope_dim) *
         std::log(max_pos / (num_rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

}  // namespace

void RopeFrequencies(double base, int64_t rope_dim, const YarnParams& yarn, float* freqs) {
  const int64_t num_pairs = rope_dim / 2;
  const float base_f = static_cast<float>(base);
  for (int64_t i = 0; i < num_pairs; ++i) {
    // 1 / base ** (arange(0, dim, 2, fp32) / dim): FP32 exponent, FP32 power,
    // FP32 division (tests/data/golden/ops/README.md §10: a double power changes 1/3 of the table).
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    freqs[i] = 1.0f / std::pow(base_f, expo);
  }
  if (!yarn.enabled) return;
  const double low_d =
      std::floor(CorrectionDim(yarn.beta_fast, rope_dim, base, yarn.original_max_position));
  const double high_d =
      std::ceil(CorrectionDim(yarn.beta_slow, rope_dim, base, yarn.original_max_position));
  const double low = std::max(low_d, 0.0);
  double high = std::min(high_d, static_cast<double>(rope_dim - 1));
  if (low == high) high += 0.001;
  const float span = static_cast<float>(high - low);
  const float factor = static_cast<float>(yarn.factor);
  for (int64_t i = 0; i < num_pairs; ++i) {
    const float ramp =
        std::clamp((static_cast<float>(i) - static_cast<float>(low)) / span, 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    const float f = freqs[i];
    freqs[i] = f / factor * (1.0f - smooth) + f * smooth;
  }
}

void ApplyRope(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rope_dim,
               const int64_t* positions, const float* freqs, bool inverse, ThreadPool* pool) {
  // Scalar (a row's 32 sin/cos and 64 heads' rotations: ~5 us), but over the
  // pool: a prefill's rows would otherwise rotate on one thread while the
  // others wait, a serial share that grows with the core count.
  const int64_t grain = std::max<int64_t>(1, kMinRotationsPerTask / std::max<int64_t>(1, heads));
  ParallelFor(pool, rows, grain, [&](int64_t begin, int64_t end) {
    ref::ApplyRope(x + begin * heads * head_dim, end - begin, heads, head_dim, rope_dim,
                   positions + begin, freqs, inverse);
  });
}

}  // namespace dsv4::kernels
