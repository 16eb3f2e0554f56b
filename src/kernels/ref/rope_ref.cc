#include "kernels/ref/rope_ref.h"

#include <cmath>

#include "kernels/scratch.h"

namespace dsv4::kernels::ref {

void ApplyRope(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rope_dim,
               const int64_t* positions, const float* freqs, bool inverse) {
  const int64_t num_pairs = rope_dim / 2;
  // Also the production kernel on every ISA: the tables come from the
  // thread's reusable scratch, not the heap.
  struct CosTag {};
  struct SinTag {};
  float* cos_t = ScratchArray<CosTag, float>::Get(static_cast<size_t>(num_pairs));
  float* sin_t = ScratchArray<SinTag, float>::Get(static_cast<size_t>(num_pairs));
  for (int64_t r = 0; r < rows; ++r) {
    // The angle is an FP32 product of the FP32 position (docs/model.md "RoPE and YaRN"): a
    // double angle drifts from the reference at long context.
    const float pos = static_cast<float>(positions[r]);
    for (int64_t i = 0; i < num_pairs; ++i) {
      const float theta = pos * freqs[i];
      cos_t[i] = std::cos(theta);
      sin_t[i] = inverse ? -std::sin(theta) : std::sin(theta);
    }
    for (int64_t h = 0; h < heads; ++h) {
      bf16* v = x + (r * heads + h) * head_dim + (head_dim - rope_dim);
      for (int64_t i = 0; i < num_pairs; ++i) {
        const float a = Bf16ToF32(v[2 * i]);
        const float b = Bf16ToF32(v[2 * i + 1]);
        v[2 * i] = F32ToBf16(a * cos_t[i] - b * sin_t[i]);
        v[2 * i + 1] = F32ToBf16(a * sin_t[i] + b * cos_t[i]);
      }
    }
  }
}

}  // namespace dsv4::kernels::ref
