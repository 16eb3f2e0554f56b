// Linear layers, one per weight kind (docs/model.md "Linear layer kinds").  Weights use the
// checkpoint's [out, in] row-major layout, except MXFP4 ones, which the SIMD kernels read in
// their panel layout (Fp4Layout), FP8 ones on the BF16 dot kernel, which reads its own
// (Fp8Layout), and BF16 ones the model pairs up for the GEMV (Bf16Layout); a weight in the other
// layout is converted per call.  Results are batch invariant: on
// a given ISA path, row m of the output depends only on row m of the input and the weight (fixed
// reduction order per output element, whatever M and the thread count).  Scalar, AVX2 and AVX-512
// may differ in the last FP32 bit of a sum (summation order).  `pool` may be null
// (single-threaded); GEMMs must not be called from inside a pool task.
#pragma once

#include <array>
#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/numeric.h"

namespace dsv4::kernels {

// How a BF16 weight [out, in] is laid out (docs/kernels.md "BF16 pair layout").
enum class Bf16Layout : uint8_t {
  kRows,   // the checkpoint's [out, in]
  kPairs,  // columns 2j and 2j + 1 together, their 128-element chunks
           // alternating (PackBf16Pairs): a two-column GEMV walk reads one
           // stream instead of two rows `in` apart
};

// Whether a BF16 [out, in] weight can take the pair layout (in % 128 == 0),
// and its element count there (out rounded up to even: an odd last column
// is paired with zeros).
bool Bf16PairsFit(int64_t in);
int64_t Bf16PairsElements(int64_t out, int64_t in);

// rows [out, in] copied into the pair layout at `pairs`
// [Bf16PairsElements]: column c's elements [128i, 128i + 128) at
// ((c / 2) · 2·in / 128 + 2i + c % 2) · 128.  REQUIRES: Bf16PairsFit(in).
void PackBf16Pairs(const bf16* rows, int64_t out, int64_t in, bf16* pairs);
// The inverse, into [out, in] rows.
void UnpackBf16Rows(const bf16* pairs, int64_t out, int64_t in, bf16* rows);

// Whether the BF16 GEMMs run kernels that read the pair layout in place on
// this CPU (any SIMD ISA); the scalar reference unpacks per call.
bool GemmBf16ReadsPairs();

// Where an Fp8Weight's codes are (docs/kernels.md "FP8 panel layout").
enum class Fp8Layout : uint8_t {
  kRows,    // the checkpoint's [out, in]
  kPanels,  // grouped by kFp8PanelColumns columns, each 128-block of a group
            // 32 chunks with its columns' codes interleaved pair by pair, two
            // blocks' chunks alternating (PackFp8Panels, Fp8PanelChunkAt):
            // what the BF16 dot kernel streams
};

// FP8 e4m3 weight with one E8M0 scale per 128x128 block.  The scales keep
// the checkpoint's layout in either code layout.
struct Fp8Weight {
  const uint8_t* codes = nullptr;   // kRows: [out, in]
  const uint8_t* scales = nullptr;  // E8M0 [ceil(out/128), ceil(in/128)]
  int64_t out = 0;
  int64_t in = 0;
  Fp8Layout layout = Fp8Layout::kRows;
};

// Columns per group of the FP8 panel layout.
inline constexpr int64_t kFp8PanelColumns = 16;

// Where chunk q (64 bytes: K pairs 2q and 2q + 1 of the group's columns) of
// group g's 128-block kb lies in the FP8 panel layout, of a weight with
// num_kb 128-blocks per row.  A group's blocks go in pairs (2i, 2i + 1; an odd
// last block alone) whose chunks alternate, so a GEMV reading a pair's two
// blocks side by side (four chains per row) streams one line after the other.
inline int64_t Fp8PanelChunkStride(int64_t num_kb, int64_t kb) {
  return (kb | 1) < num_kb ? 128 : 64;
}
inline int64_t Fp8PanelChunkAt(int64_t num_kb, int64_t g, int64_t kb, int64_t q) {
  return (g * num_kb + (kb & ~int64_t{1})) * 2048 + (kb & 1) * 64 +
         q * Fp8PanelChunkStride(num_kb, kb);
}

// Bytes of the FP8 panel layout's codes for an [out, in] weight (out
// rounded up to whole groups, the padding columns' codes +0).
// REQUIRES: in % 128 == 0.
int64_t Fp8PanelBytes(int64_t out, int64_t in);

// w (kRows, in % 128 == 0) copied into the panel layout at `codes`
// [Fp8PanelBytes]; returns that view (the same scales).
Fp8Weight PackFp8Panels(const Fp8Weight& w, uint8_t* codes);

// w (kPanels) copied back into the row layout at `codes` [out·in].
Fp8Weight UnpackFp8Rows(const Fp8Weight& w, uint8_t* codes);

// The code of column col at input k, in either layout.
uint8_t Fp8CodeOf(const Fp8Weight& w, int64_t col, int64_t k);

// Where an Fp4Weight's bytes are (docs/kernels.md "FP4 panel layout").
enum class Fp4Layout : uint8_t {
  kRows,    // the checkpoint's: packed [out, in/2], scales [out, in/32]
  kPanels,  // grouped by kFp4PanelColumns columns, each 128-block of a group
            // contiguous with its columns' bytes interleaved 4 by 4
            // (PackFp4Panels): what the SIMD kernels stream
};

// MXFP4 weight: two e2m1 codes per byte along `in` (low nibble = even
// element), one E8M0 scale per 32 input elements of a row.
struct Fp4Weight {
  const uint8_t* packed = nullptr;  // kRows: [out, in/2]
  const uint8_t* scales = nullptr;  // kRows: E8M0 [out, in/32]
  int64_t out = 0;
  int64_t in = 0;
  Fp4Layout layout = Fp4Layout::kRows;
};

// The E8M0 scale bytes for which every weight value e2m1 · 2^(e − 127) is a
// normal BF16 number and its product with any act_quant activation (scale
// >= 2^-22) a multiple of 2^-126: 2^-94 .. 2^125.
inline constexpr uint8_t kFp4Bf16MinScale = 33;
inline constexpr uint8_t kFp4Bf16MaxScale = 252;

// True when all `count` scale bytes lie in [kFp4Bf16MinScale, kFp4Bf16MaxScale].
bool Fp4ScalesFitBf16(const uint8_t* scales, int64_t count);

// Whether Fp4Gemm runs w on BF16 dot products on this CPU: every scale of w
// fits (Fp4ScalesFitBf16; for a weight in the panel layout the flag
// PackFp4Panels left after its scales, Fp4PanelsFitBf16), and the CPU has
// AVX512-BF16 and VBMI (not while a test pins the exact kernels).  Any
// other weight runs on the exact integer kernels (docs/kernels.md "FP4 with
// BF16 dot products").
bool Fp4GemmUsesBf16Dots(const Fp4Weight& w);

// Columns per group of the panel layout.
inline constexpr int64_t kFp4PanelColumns = 16;

// Bytes of the panel layout's codes and scales for an [out, in] weight
// (out rounded up to whole groups; the scales followed by one flag byte:
// 1 when every scale fits Fp4ScalesFitBf16, set when packed, so a view made
// before its weight is packed learns it with the bytes).
// REQUIRES: in % 128 == 0.
int64_t Fp4PanelPackedBytes(int64_t out, int64_t in);
int64_t Fp4PanelScaleBytes(int64_t out, int64_t in);

// The flag byte of w's packed scales (REQUIRES: w.layout == kPanels and w
// packed).
bool Fp4PanelsFitBf16(const Fp4Weight& w);

// w (kRows, in % 128 == 0) copied into the panel layout at `packed`
// [Fp4PanelPackedBytes] and `scales` [Fp4PanelScaleBytes]; returns that view.
// Same codes, same scales: every GEMM gives the same bits on either layout.
Fp4Weight PackFp4Panels(const Fp4Weight& w, uint8_t* packed, uint8_t* scales);

// Column col's 32-block j in either layout: its 16 packed bytes (32 codes,
// low nibble first) and its E8M0 scale byte.
std::array<uint8_t, 16> Fp4CodesOf(const Fp4Weight& w, int64_t col, int64_t j);
uint8_t Fp4ScaleOf(const Fp4Weight& w, int64_t col, int64_t j);

// y[M, out] = bf16(sum over 128-blocks kb of (sum_k qa*qw) * (sa[m,kb]*sw[n/128,kb])).
// x_codes [M, in] e4m3 and x_scales [M, in/128] come from ActQuantFp8(block 128).
void Fp8Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp8Weight& w, bf16* y,
             ThreadPool* pool);

// y[M, out] = bf16(sum over 32-blocks j of (part_j * sa[m,j/4]) * sw[n,j]), in
// ascending j, where part_j = fp32(exact sum_k qa*qw) is the 32 products summed
// exactly and rounded once (no summation order inside a block: docs/kernels.md).
void Fp4Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp4Weight& w, bf16* y,
             ThreadPool* pool);

// True when Fp8Gemm (and the FP8 entries of BlockScaledGemmBatch) run on the
// BF16 dot-product kernel for the active ISA on this CPU, false for the FMA
// one (docs/kernels.md "FP8 with BF16 dot products").  For cost accounting.
bool Fp8GemmUsesBf16Dots();

// One GEMM of a BlockScaledGemmBatch: Fp8Gemm (fp8 set) or Fp4Gemm (fp4 set;
// exactly one of the two) of x_codes [m, in] / x_scales [m, in/128] into
// y [m, out].
struct BlockScaledGemm {
  const uint8_t* x_codes = nullptr;
  const float* x_scales = nullptr;
  int64_t m = 0;
  const Fp8Weight* fp8 = nullptr;
  const Fp4Weight* fp4 = nullptr;
  bf16* y = nullptr;
};

// Runs gemms[0..count) as one task space in one pool dispatch: bitwise equal
// to calling Fp8Gemm / Fp4Gemm on each entry (the same panel kernels on the
// same tiles), without a dispatch, a wake-up and a tail per GEMM (a decode
// step's MoE runs every selected expert's gate/up GEMVs, then their down
// GEMVs, as two batches instead of ~14-21 calls).  Entries that read the same
// x_codes with the same kind, m and in share one activation decode.
// REQUIRES: every entry's in % 128 == 0; outputs do not overlap each other or
// any input.
void BlockScaledGemmBatch(const BlockScaledGemm* gemms, int64_t count, ThreadPool* pool);

// y[M, N] (row stride ldy) = bf16(x[M, K] (row stride ldx) . w[N, K]^T), FP32 accumulation.
// w in `layout` (every BF16 GEMM below takes either; the same bits).
void GemmBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y,
              int64_t ldy, ThreadPool* pool, Bf16Layout layout = Bf16Layout::kRows);

// True when every dequantized value e4m3(code)·scale of w is a finite BF16
// number exactly, with margin for the kernels' FP16 decode route: no NaN
// code (0x7f/0xff) and every scale byte in [10, 246] (2^-117 .. 2^119; real
// checkpoints use 2^-10 .. 2^-3).  O(out·in) byte scan.
bool Fp8IsExactBf16(const Fp8Weight& w);

// GemmBf16 on the BF16 weight bf16(e4m3(code)·scale), read as FP8, at half
// the weight bytes (wo_a).  Where Fp8GemmUsesBf16Dots(), the FP8 BF16 dot
// kernel: the same exact products summed in that kernel's fixed order
// (products below 2^-126 flushed), batch invariant; elsewhere bitwise equal to
// GemmBf16 on the dequantized copy (the same per-element FP32 chain).
// REQUIRES: w.in % 128 == 0 and Fp8IsExactBf16(w) (checked by the caller once
// at load).  y[M, out] (row stride ldy); x[M, in] (row stride ldx).
void GemmBf16Fp8(const bf16* x, int64_t ldx, int64_t m, const Fp8Weight& w, bf16* y, int64_t ldy,
                 ThreadPool* pool);

// GemmBf16Fp8 of a grouped projection (wo_a) in one call: output rows
// [g·out/groups, (g+1)·out/groups) of w read x's columns [g·w.in, (g+1)·w.in),
// for every g < groups.  Bitwise equal to `groups` GemmBf16Fp8 calls on the
// row slices (the same kernel on the same tiles), but one pool dispatch
// instead of `groups` (a decode step's wo_a is 8 GEMVs of 4 MB each).
// REQUIRES: w.in % 128 == 0, (w.out / groups) % 128 == 0 and
// Fp8IsExactBf16(w).  y[M, out] (row stride ldy); x[M, groups·in] (row
// stride ldx).
void GemmBf16Fp8Grouped(const bf16* x, int64_t ldx, int64_t m, int64_t groups, const Fp8Weight& w,
                        bf16* y, int64_t ldy, ThreadPool* pool);

// y[M, N] = x[M, K] . w[N, K]^T in FP32 (BF16 operands upcast exactly).
void GemmBf16F32(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, float* y,
                 ThreadPool* pool, Bf16Layout layout = Bf16Layout::kRows);

// GemmBf16F32 of one x against two weights (a compressor's wkv and wgate):
// y0[M, n0] = x . w0^T and y1[M, n1] = x . w1^T, bitwise equal to the two
// calls (the same kernel on the same tiles), with x converted once and one
// pool dispatch instead of two.  Both weights in `layout`.
void GemmBf16F32Pair(const bf16* x, int64_t m, int64_t k, const bf16* w0, int64_t n0, float* y0,
                     const bf16* w1, int64_t n1, float* y1, ThreadPool* pool,
                     Bf16Layout layout = Bf16Layout::kRows);

// y[M, N] ~ x[M, K] . w[N, K]^T in FP32, computed with BF16 dot-product
// instructions where the CPU has them (AVX512-BF16 `vdpbf16ps`: two BF16
// products added per lane per step with their own rounding, denormals
// flushed), about 3-4x fewer instructions than GemmBf16F32; elsewhere it is
// GemmBf16F32 itself.  Its bits differ from GemmBf16F32's (within the usual
// summation-order bound), so it serves values whose exact bits never reach an
// output: MTP draft logits (docs/engine.md "8.3 MTP proposer").  Still deterministic: on a
// given CPU a row's result does not depend on M or the thread count.
void GemmBf16F32Approx(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, float* y,
                       ThreadPool* pool, Bf16Layout layout = Bf16Layout::kRows);

// y[M, N] = x[M, K] . w[N, K]^T in FP32 with FP32 weights (mHC mixes).
void GemmBf16xF32(const bf16* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                  ThreadPool* pool);

}  // namespace dsv4::kernels
