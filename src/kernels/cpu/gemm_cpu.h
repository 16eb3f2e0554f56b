// SIMD panel kernels behind kernels/gemm.h (internal to the kernels layer).
//
// The drivers (gemm.cc, gemm_block_scaled.cc; gemm_driver.h) prepare the
// activations once per call (decoded to FP32 or BF16, see the Args structs)
// and split the output columns into panels of GemmKernels::panel columns
// (and, for long batches, blocks of kRowBlock rows) over the thread pool;
// each kernel call computes rows [row_begin, row_end) of the panels
// [panel_begin, panel_end).  Which panel a
// column belongs to never depends on M or on the thread count, and every
// output element goes through one fixed sequence of FP32 operations, so the
// results are batch invariant per ISA (docs/kernels.md).
//
// Each kernel family is written once (cpu/gemm_*-inl.h) and instantiated per
// ISA in that ISA's translation unit (gemm_avx2.cc, gemm_avx512.cc), which
// exports only a table of function pointers.  The AVX-512 unit is compiled
// with AVX-512 flags: it must not define inline functions or templates with
// external linkage (the linker could pick their AVX-512 copy for AVX2-only
// callers), hence only plain data and structs cross this header.
#pragma once

#include <cstdint>

#include "kernels/gemm.h"
#include "tensor/numeric.h"

namespace dsv4::kernels::cpu {

// Rows per parallel task when a batch is split over rows too.
inline constexpr int64_t kRowBlock = 64;

// Where gemm_activations.cc puts the BF16 dot kernels' activations (Fp8GemmArgs::xh,
// Fp4GemmArgs::xh) of m rows, `in` wide: by row block, block-major within
// each (the rows of a kRowBlock-row block together; row r's 128-block kb
// at (r / kRowBlock)·ldrb + (kb·min(m, kRowBlock) + r % kRowBlock)·128).
// A register tile's rows are 128 apart, so a block of several rows is one
// short span, and a row block's blocks follow each other, so a tile's pass
// over its K streams one contiguous region (block-major over all m rows put
// them m·256 bytes apart: docs/performance.md "GEMM outputs: rows 4 KiB
// apart").  With more than kRowBlock rows the last block is padded to
// kRowBlock rows, so ldkb is the same for every block.
inline constexpr int64_t kDotTileLdx = 128;
struct DotActivationLayout {
  int64_t rows = 0;  // per block: min(m, kRowBlock)
  int64_t ldx = kDotTileLdx, ldkb = 0, ldrb = 0;
  int64_t elements = 0;  // BF16 values spanned: at most 2·m·in (m·in floats)
  DotActivationLayout(int64_t m, int64_t in)
      : rows(m < kRowBlock ? m : kRowBlock),
        ldkb(rows * 128),
        ldrb(kRowBlock * in),
        elements(m <= kRowBlock ? m * in : (m + kRowBlock - 1) / kRowBlock * ldrb) {}
  // Row r's row block: its offset, where Fp8DotActivations* and
  // Fp4DotActivations* write r as row r % kRowBlock of `rows`.
  int64_t BlockOffset(int64_t r) const { return r / kRowBlock * ldrb; }
};

// The part of the output one task computes.
struct Tile {
  int64_t row_begin = 0, row_end = 0;
  int64_t panel_begin = 0, panel_end = 0;
};

struct Fp8GemmArgs {
  // [m, w.in] activation codes decoded to FP32 and multiplied by 2^8 (the
  // kernels decode weights through FP16, which yields w·2^-8; the product
  // of the two is the exact q_a·q_w).
  const float* x = nullptr;
  const float* x_scales = nullptr;  // [m, w.in/128]
  int64_t m = 0;
  Fp8Weight w;
  bf16* y = nullptr;  // [m, w.out]
  // Instead of x, for GemmKernels::fp8_bf16dot: [m, w.in] the codes' BF16
  // values (exact), against a weight in the panel layout; row r's 128-block
  // kb at xh + (r / kRowBlock)·ldrb + (r % kRowBlock)·ldx + kb·ldkb
  // (row-major: ldx = w.in, ldkb = 128; gemm_activations.cc decodes into a
  // DotActivationLayout).  More than 4 rows must come with ldx = 128 (the
  // register tiles address rows 128 apart).
  const bf16* xh = nullptr;
  int64_t ldx = 0;   // 0 means w.in
  int64_t ldkb = 0;  // 0 means 128
  int64_t ldrb = 0;  // 0 means kRowBlock·ldx
  int64_t ldy = 0;   // row stride of y; 0 means w.out
  // xh already holds each code's value times its block's scale (gemm_activations.cc
  // does this when every scale folds exactly: Fp8ScalesFold), so the kernel
  // multiplies a block's sum by the weight's scale alone and x_scales is not
  // read.  The same bits as unscaled values: see kFp8FoldMinScale.  BF16
  // activations that were never quantized (wo_a) come this way, unscaled.
  bool x_scaled = false;
};

// Folding a power-of-two activation scale s = 2^k into the BF16 values of
// its codes is exact, and so is everything after it: every product, sum and
// rounding of a block's two chains is the unscaled one times 2^k (scaling
// by a power of two commutes with rounding while nothing overflows or turns
// subnormal), and the block's sum times the weight's scale is then the same
// real number as the unscaled sum times (s · s_w), rounded once the same
// way: s · s_w is exact down to 2^-149, which s >= 2^-22 and s_w >= 2^-127
// (E8M0) guarantee, and up to 2^127, which gemm_activations.cc checks against the
// weight's scales where some s exceeds 1 (a real checkpoint's s_w are far
// below 1).  With codes in [2^-9, 448] in magnitude, k in [-22, 100] keeps
// every scaled value, product and partial sum of 128 products inside the
// FP32 normal range (2^-40 .. 2^124.7) and each scaled value's exponent
// within BF16's, so vdpbf16ps flushes nothing.  act_quant's scales are
// powers of two in [2^-22, 2^120] (its 1e-4 floor; above 2^100 only for
// activations near the BF16 maximum): a call with any scale outside the
// range keeps them apart.
inline constexpr float kFp8FoldMinScale = 0x1p-22f;
inline constexpr float kFp8FoldMaxScale = 0x1p100f;

// Whether [m, w.in/128] activation scales fold into the values exactly
// against w: all powers of two in [kFp8FoldMinScale, kFp8FoldMaxScale], and
// the largest times each of w's scales at most 2^127 (gemm_activations.cc).
bool Fp8ScalesFold(const float* x_scales, int64_t m, const Fp8Weight& w);

// FP4 GEMM activations: one record of kFp4RecordBytes per 128-element block
// of a row (row r, block kb at x + (r·in/128 + kb)·kFp4RecordBytes), built
// once per call by gemm_activations.cc.  The kernels compute each 32-block's exact
// integer sum Σ a·(2·e2m1 + 12) with unsigned x signed byte dot products
// (vpdpbusd), where a = e4m3·2^9 is the code's value as an integer
// (|a| <= 448·2^9 < 2^18):
//   bytes [128p, 128p + 128), p = 0, 1, 2: plane p of a, a = p0 + 2^8·p1 +
//     2^16·p2 (p0, p1 signed bytes, p2 in [-4, 4]); the block's 64 even
//     elements first, then its 64 odd ones (the low and high nibbles), so
//     the 4 elements that meet a panel chunk's 4 bytes of a column are one
//     dword, whatever the vector width;
//   int32 at kFp4OffsetAt + 4j: 12·Σ a over 32-block j (the +12 that makes
//     the weights unsigned, taken back out of the sum);
//   int32 at kFp4NanAt: 1 when a code of the block is NaN (0x7f / 0xff),
//     which makes the block's contribution NaN as in the reference;
//   int32 at kFp4PlanesAt: 3, or 2 when every a of the block is a multiple
//     of 8 (|e4m3| >= 2^-3 or 0: most blocks of real-looking activations).
//     Then the planes hold a/8 = p0 + 2^8·p1 (plane 2 zero), the offsets are
//     12·Σ a/8, and the kernels skip plane 2 (4 dot products per 128-block
//     and column instead of 6);
//   float at kFp4UnitAt: what one unit of the integer sum weighs, 2^-10
//     (a carries 2^9, 2·e2m1 + 12 carries 2), or 2^-7 with 2 planes.
inline constexpr int64_t kFp4RecordBytes = 512;
inline constexpr int64_t kFp4OffsetAt = 384;
inline constexpr int64_t kFp4NanAt = 400;
inline constexpr int64_t kFp4PlanesAt = 404;
inline constexpr int64_t kFp4UnitAt = 408;

// Tiles of at least this many rows take the AVX-512 FP4 outer-product
// kernel (gemm_fp4_outer-inl.h), fewer the row kernels: same bits either way.
// Since the panel layout puts the columns in the lanes, the row kernels
// (4 rows per pass) beat it at 8 rows on weights streamed from DRAM
// (1.2-1.3x) and matched it on cache-resident ones; at 16 rows it won on
// cache-resident weights (1.1x) and matched on DRAM: docs/performance.md
// "FP4: columns in the lanes".
inline constexpr int64_t kFp4OuterMinRows = 16;

struct Fp4GemmArgs {
  const uint8_t* x = nullptr;       // [m, w.in/128] records (above)
  const float* x_scales = nullptr;  // [m, w.in/128]
  int64_t m = 0;
  Fp4Weight w;
  bf16* y = nullptr;  // [m, w.out]
  // The outer-product kernel's row threshold (kFp4OuterMinRows; larger than
  // any M in tests and benchmarks that pin the row kernels).
  int64_t outer_min_rows = kFp4OuterMinRows;
  // Instead of x and x_scales, for GemmKernels::fp4_bf16dot: [m, w.in] each
  // code's value times its block's scale in BF16 (Fp4DotActivationsScalar),
  // row r's 128-block kb at xh + (r / kRowBlock)·ldrb + (r % kRowBlock)·ldx
  // + kb·ldkb (gemm_activations.cc: a DotActivationLayout, whose ldx = 128 the register
  // tiles assume), against a weight in the panel layout whose scales fit
  // (Fp4PanelsFitBf16).
  const bf16* xh = nullptr;
  int64_t ldx = 0;   // 0 means w.in
  int64_t ldkb = 0;  // 0 means 128
  int64_t ldrb = 0;  // 0 means kRowBlock·ldx
};

// Dense GEMM with BF16 or FP32 weights and BF16 or FP32 output.
struct DenseGemmArgs {
  const float* x = nullptr;  // [m, ldx] activations in FP32, zero beyond k up to ldx
  int64_t ldx = 0;           // multiple of 128, >= k
  int64_t m = 0;
  int64_t k = 0;
  const bf16* w_bf16 = nullptr;  // [n, k]; exactly one of w_bf16 / w_f32 / w_fp8 is set
  bool w_pairs = false;          // w_bf16 in Bf16Layout::kPairs (k % 128 == 0)
  const float* w_f32 = nullptr;  // [n, k], possibly misaligned
  // Or FP8 codes with block scales whose code·scale values are all exact in
  // BF16 (k % 128 == 0): decoded to those values, same chain as w_bf16.
  const Fp8Weight* w_fp8 = nullptr;
  int64_t n = 0;
  bf16* y_bf16 = nullptr;  // [m, ldy]; exactly one of y_bf16 / y_f32 is set
  float* y_f32 = nullptr;  // [m, ldy]
  int64_t ldy = 0;
};

// BF16 x BF16 -> FP32 with AVX512-BF16 dot products (GemmBf16F32Approx).
struct Bf16DotArgs {
  const bf16* x = nullptr;  // [m, k]
  int64_t m = 0;
  int64_t k = 0;
  const bf16* w = nullptr;  // [n, k]
  int64_t n = 0;
  float* y = nullptr;    // [m, n]
  bool w_pairs = false;  // w in Bf16Layout::kPairs (k % 128 == 0)
};

// One ISA's kernels; each computes the part t of the output.
struct GemmKernels {
  int64_t panel = 0;  // output columns per panel (the ISA's FP32 lanes)
  void (*fp8)(const Fp8GemmArgs& a, const Tile& t) = nullptr;
  // FP8 with BF16 pair dot products (reads Fp8GemmArgs::xh; its own bits,
  // docs/kernels.md).  REQUIRES: AVX512-BF16 and AVX512-VBMI.  Null where none.
  void (*fp8_bf16dot)(const Fp8GemmArgs& a, const Tile& t) = nullptr;
  void (*fp4)(const Fp4GemmArgs& a, const Tile& t) = nullptr;
  // The same FP4 kernel without VNNI dot products (vpmaddubsw + vpmaddwd,
  // same exact sums, same bits), for AVX-512 CPUs without AVX512-VNNI; null
  // where fp4 needs no VNNI.
  void (*fp4_without_vnni)(const Fp4GemmArgs& a, const Tile& t) = nullptr;
  // The same FP4 kernel decoding the weights with VBMI byte permutes (same
  // bits), for CPUs with AVX512-VNNI and AVX512-VBMI; null where none.
  void (*fp4_vbmi)(const Fp4GemmArgs& a, const Tile& t) = nullptr;
  // FP4 with BF16 pair dot products (reads Fp4GemmArgs::xh; its own bits,
  // docs/kernels.md).  REQUIRES: AVX512-BF16 and AVX512-VBMI, a weight with
  // every scale in range (Fp4PanelsFitBf16).  Null where none.
  void (*fp4_bf16dot)(const Fp4GemmArgs& a, const Tile& t) = nullptr;
  void (*dense)(const DenseGemmArgs& a, const Tile& t) = nullptr;
  // BF16 pair dot products (GemmBf16F32Approx); null where the ISA has none.
  // REQUIRES: the CPU feature behind it (AVX-512: AVX512-BF16).
  void (*bf16_dot)(const Bf16DotArgs& a, const Tile& t) = nullptr;
  // FP4 activation records of one row (below); null where the scalar
  // builder serves.
  void (*fp4_records)(const uint8_t* codes, int64_t in, uint8_t* rec) = nullptr;
  // fp8_bf16dot's activations of one row (below); set where fp8_bf16dot is.
  void (*fp8_dot_activations)(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                              int64_t r, bf16* xh) = nullptr;
  // fp4_bf16dot's activations of one row (below); set where fp4_bf16dot is.
  void (*fp4_dot_activations)(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                              int64_t r, bf16* xh) = nullptr;
};

// The FP4 GEMM activation records (Fp4GemmArgs above) of one row of `in`
// FP8 codes, in/128 records at rec: the scalar builder (gemm_activations.cc) and the
// AVX-512 one (fp4_records_avx512.cc), byte for byte the same.
// REQUIRES: in % 128 == 0; the Avx512 one the CPU's AVX-512 (F, BW, VL, DQ).
void BuildFp4RecordsScalar(const uint8_t* codes, int64_t in, uint8_t* rec);
void BuildFp4RecordsAvx512(const uint8_t* codes, int64_t in, uint8_t* rec);

// Row r of [m, in] FP8 activation codes as the BF16 dot kernel reads them
// (Fp8GemmArgs::xh): each code's BF16 value (exact), times its 128-block's
// scale where `scales` (the row's in/128) is not null (Fp8GemmArgs::x_scaled),
// block-major (block kb of row r at xh + (kb·m + r)·128).  The scalar one
// (gemm_activations.cc, a table lookup per code) and the AVX-512 VBMI one
// (gemm_avx512_vbmi.cc, 64 codes through the weight decode's byte tables),
// bit for bit the same.
// REQUIRES: in % 128 == 0; every scale a power of two in [kFp8FoldMinScale,
// kFp8FoldMaxScale]; the Avx512Vbmi one AVX512-VBMI.
void Fp8DotActivationsScalar(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                             int64_t r, bf16* xh);
void Fp8DotActivationsAvx512Vbmi(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                                 int64_t r, bf16* xh);

// Row r of [m, in] FP8 activation codes with their [m, in/128] block scales
// as the FP4 BF16 dot kernel reads them (Fp4GemmArgs::xh): bf16(value ·
// scale), rounded to nearest even (exact for power-of-two scales), block-major
// as above, each 8 in the order K 0, 4, 1, 5, 2, 6, 3, 7 (the kernel pairs a
// weight chunk's K j with j + 4).  The scalar one (gemm_activations.cc) and the AVX-512 VBMI one
// (gemm_avx512_vbmi.cc), bit for bit the same.
// REQUIRES: in % 128 == 0; the Avx512Vbmi one AVX512-VBMI.
void Fp4DotActivationsScalar(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                             int64_t r, bf16* xh);
void Fp4DotActivationsAvx512Vbmi(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                                 int64_t r, bf16* xh);

// Defined (constant-initialised) in gemm_avx2.cc / gemm_avx512.cc; use only
// when ActiveIsa() is that ISA.
extern const GemmKernels kGemmKernelsAvx2;
extern const GemmKernels kGemmKernelsAvx512;

// The AVX-512 FP4 kernel with VBMI (gemm_avx512_vbmi.cc, compiled with
// -mavx512vbmi).  REQUIRES: AVX512-VNNI and AVX512-VBMI.
void Fp4GemmPanelsAvx512Vbmi(const Fp4GemmArgs& a, const Tile& t);

// The AVX-512 FP8 kernel with BF16 dot products (gemm_avx512_vbmi.cc).
// REQUIRES: AVX512-BF16 and AVX512-VBMI.
void Fp8DotGemmPanelsAvx512(const Fp8GemmArgs& a, const Tile& t);

// The AVX-512 FP4 kernel with BF16 dot products (gemm_avx512_vbmi.cc).
// REQUIRES: AVX512-BF16 and AVX512-VBMI.
void Fp4DotGemmPanelsAvx512(const Fp4GemmArgs& a, const Tile& t);

// Tests and benchmarks: run the FP4 GEMMs on the exact kernels (fp4,
// fp4_vbmi) even where the BF16 dot one would run.
void UseFp4WithoutBf16DotForTesting(bool on);

// Tests: run the FP8 GEMMs through fp8 (the FMA kernel) even on a CPU with
// BF16 dot products and VBMI.
void UseFp8WithoutBf16DotForTesting(bool on);

// Tests: run the FP4 GEMMs through fp4 (not fp4_vbmi) even on a CPU with
// VBMI (both must give the same bits).
void UseFp4WithoutVbmiForTesting(bool on);

// Tests and benchmarks: run the FP4 GEMMs through the row kernels only,
// never the outer-product one (both must give the same bits).
void UseFp4RowKernelsForTesting(bool on);

// Tests: run the FP4 GEMMs through fp4_without_vnni where a table has one,
// even on a CPU with VNNI (both must give the same bits).
void UseFp4WithoutVnniForTesting(bool on);

}  // namespace dsv4::kernels::cpu
