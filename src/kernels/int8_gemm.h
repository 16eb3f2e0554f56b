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

// How an INT8 weight's codes are laid out.
enum class Int8Layout : uint8_t {
  kRows,    // the checkpoint's [out, in], a row per output channel
  kPanels,  // blocks of kInt8PanelColumns columns ready for the VNNI outer
            // product, each followed by its columns' offset sums
            // (PackInt8Panels; docs/kernels.md "W8A8 panel layout")
};

// Output columns per block of the panel layout.
inline constexpr int64_t kInt8PanelColumns = 64;

// Per-channel INT8 weight: any int8 codes (dsv4 convert writes [-127, 127];
// -128 from other producers is exact too), scales[n] = amax_n / 127.
struct Int8Weight {
  const int8_t* codes = nullptr;  // [out, in] (kRows) or Int8PanelBytes (kPanels)
  const float* scales = nullptr;  // [out]
  int64_t out = 0;
  int64_t in = 0;
  Int8Layout layout = Int8Layout::kRows;
};

// Bytes of one block of the panel layout (kInt8PanelColumns columns over the
// whole input, then their 64 INT32 offset sums), and of a whole weight.
int64_t Int8PanelBlockBytes(int64_t in);
int64_t Int8PanelBytes(int64_t out, int64_t in);

// Copies a kRows weight into the panel layout at `codes` (Int8PanelBytes
// bytes, 64-byte aligned); returns that view (the same scales).  Block b
// holds columns [64b, 64b + 64) (absent ones zero): for each group of 4
// inputs q, 4 vectors of 16 columns x 4 bytes (byte 4c + i of vector j =
// input 4q + i of column 16j + c, zero beyond in), then int32
// 128 * sum_k code[n, k] for its 64 columns.
Int8Weight PackInt8Panels(const Int8Weight& w, int8_t* codes);

// The inverse: a kPanels weight back into [out, in] rows at `codes`.
Int8Weight UnpackInt8Rows(const Int8Weight& w, int8_t* codes);

// Whether Int8Gemm reads the panel layout on this CPU (AVX-512 VNNI): the
// model packs its W8A8 weights so at load when it does.  Int8Gemm takes
// either layout anywhere: kRows runs the row kernels, and a kPanels weight
// on a CPU without VNNI is unpacked per call.
bool Int8GemmUsesPanels();

// Dynamic per-token symmetric quantization of x [m, k] (BF16, row stride k):
//   amax = max_k |x|, scale = max(amax, 1e-4) / 127,
//   q = clamp(rint(x / scale), -127, 127)  (round half to even, FP32 division)
// codes [m, k], scales [m].  Row r depends only on row r of x.  SIMD where
// the ISA has it (IEEE division and round-to-even per element: the same bits
// as the scalar reference), rows split over `pool` (may be null).
void ActQuantInt8PerToken(const bf16* x, int64_t m, int64_t k, int8_t* codes, float* scales,
                          ThreadPool* pool = nullptr);

// y [m, w.out] = bf16((float(sum_k x_codes[m,k]*w.codes[n,k]) * x_scales[m]) * w.scales[n]).
// REQUIRES: x_codes in [-127, 127] (as ActQuantInt8PerToken produces).
void Int8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& w, bf16* y,
              ThreadPool* pool);

}  // namespace dsv4::kernels
