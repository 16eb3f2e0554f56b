// W8A8 linear layers (docs/convert.md "Inference path", docs/model.md "Linear layer kinds"): INT8
// weights with one FP32 scale per output channel, activations quantized per token (per row over the
// whole K) to INT8 at run time.
//
// Numerics (identical on every ISA): the dot product sum_k qa[m,k]*qw[n,k] is
// accumulated exactly in INT32 (|qa| <= 127, |qw| <= 128; K <= 65,536 is
// required, far above the model's widest input of 8,192),
// so the summation order cannot change the result and the scalar, AVX2 and
// AVX-512 VNNI paths are bit-identical.  The output is
//   y[m, n] = bf16((float(acc) * sa[m]) * sw[n])
// with float(acc) rounded to nearest-even (exact below 2^24).  Results are batch
// and thread-count invariant.  `pool` may be null.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/numeric.h"

namespace dsv4::kernels {

// Per-channel INT8 weight: any int8 codes (dsv4 convert writes [-127, 127];
// -128 from other producers is exact too), scales[n] = amax_n / 127.
struct Int8Weight {
  const int8_t* codes = nullptr;  // [out, in]
  const float* scales = nullptr;  // [out]
  int64_t out = 0;
  int64_t in = 0;
};

// Dynamic per-token symmetric quantization of x [m, k] (BF16, row stride k):
//   amax = max_k |x|, scale = max(amax, 1e-4) / 127,
//   q = clamp(rint(x / scale), -127, 127)  (round half to even, FP32 division)
// codes [m, k], scales [m].  Row r depends only on row r of x.
void ActQuantInt8PerToken(const bf16* x, int64_t m, int64_t k, int8_t* codes, float* scales);

// y [m, w.out] = bf16((float(sum_k x_codes[m,k]*w.codes[n,k]) * x_scales[m]) * w.scales[n]).
// REQUIRES: x_codes in [-127, 127] (as ActQuantInt8PerToken produces).
void Int8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& w, bf16* y,
              ThreadPool* pool);

}  // namespace dsv4::kernels
