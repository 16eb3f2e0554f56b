// AVX-512 VNNI kernel of int8_gemm_cpu.h: an outer product over weights in
// the panel layout (int8_gemm.h: packed at load, or per task here from rows).
//
// vpdpbusd multiplies unsigned by signed bytes, so the activation is offset
// to unsigned (by the driver's pass, or by the tile after each broadcast:
// Int8PackedArgs::x_signed): a + 128 = a XOR 0x80, and sum (a + 128) w =
// sum a w + 128 sum w, where 128 sum w is stored after each block (no
// second dot product).  For each group of 4 consecutive k a block holds 4
// vectors of 16 columns x 4 bytes; a 6-row x 64-column micro-tile keeps 24
// INT32 accumulator vectors in registers and, per 4 k, loads 4 weight
// vectors and broadcasts each row's 4 activation bytes: 24 vpdpbusd per 10
// loads, no horizontal sums.
// All sums are exact INT32 (|a + 128| <= 255, |w| <= 128; the per-row total
// stays below 2^31 for K <= 65,536, checked by the driver; INT32 sums wrap
// modulo 2^32 and the true total fits), and any int8 weight, -128 included,
// is exact: the result is the same bits as every other path.
#include <cstring>

#include "kernels/cpu/avx512_bf16_store-inl.h"
#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/avx512_transpose-inl.h"
#include "kernels/cpu/int8_gemm_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

[[gnu::always_inline]] inline __mmask64 TailMask(int64_t count) {
  return count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

// Packs weight rows [col_begin, col_end) (<= 64) over the whole K into one
// block of the panel layout (int8_gemm.h PackInt8Panels: absent columns and
// inputs beyond K zero, then 128 x each column's sum), here with 16 x 16
// transposes of 4-byte groups.
void PackPanel(const Int8Weight& w, int64_t col_begin, int64_t col_end, int8_t* panel) {
  const int64_t k = w.in;
  const int64_t k4n = (k + 3) / 4;
  constexpr int nbv = kInt8PackedCols / 16;
  const __m512i ones = _mm512_set1_epi8(1);
  for (int j = 0; j < nbv; ++j) {
    const int64_t n0 = col_begin + 16 * j;
    __m512i sum = _mm512_setzero_si512();
    for (int64_t k0 = 0; k0 < k; k0 += 64) {
      const __mmask64 tail = TailMask(k - k0);
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        r[i] = n0 + i < col_end ? _mm512_maskz_loadu_epi8(tail, w.codes + (n0 + i) * k + k0)
                                : _mm512_setzero_si512();
      }
      Transpose16x16(r);
      const int64_t q0 = k0 / 4;
      const int64_t nq = k4n - q0 < 16 ? k4n - q0 : 16;
      for (int64_t s = 0; s < nq; ++s) {
        _mm512_store_si512(panel + ((q0 + s) * nbv + j) * 64, r[s]);
        sum = _mm512_dpbusd_epi32(sum, ones, r[s]);
      }
    }
    _mm512_store_si512(panel + k4n * 256 + j * 64, _mm512_slli_epi32(sum, 7));
  }
}

// One micro-tile: rows [r0, r0 + 6) of the 64 packed columns, then the
// exact result, scaled like the reference.  The 24 accumulators are named
// variables: as a 1.5 KB array GCC 12 kept them in memory (stored back on
// every k step, 2x slower).
#define DSV4_INT8_ROW(r)                            \
  if constexpr (R > (r)) {                          \
    int32_t four;                                   \
    std::memcpy(&four, x + (r)*ldx + 4 * q, 4);     \
    const __m512i xv = Offset<kSigned>(four);       \
    c##r##0 = _mm512_dpbusd_epi32(c##r##0, xv, w0); \
    c##r##1 = _mm512_dpbusd_epi32(c##r##1, xv, w1); \
    c##r##2 = _mm512_dpbusd_epi32(c##r##2, xv, w2); \
    c##r##3 = _mm512_dpbusd_epi32(c##r##3, xv, w3); \
  }
#define DSV4_INT8_SAVE(r)                     \
  if constexpr (R > (r)) {                    \
    _mm512_store_si512(exact[r][0], c##r##0); \
    _mm512_store_si512(exact[r][1], c##r##1); \
    _mm512_store_si512(exact[r][2], c##r##2); \
    _mm512_store_si512(exact[r][3], c##r##3); \
  }

static_assert(kInt8PackedRows == 6 && kInt8PackedCols == 64);

// A row's 4 activation bytes in every lane, as vpdpbusd's unsigned operand:
// kSigned, the codes themselves, offset here (XOR 0x80 after the broadcast,
// on a vector pipe beside the dot products); else already offset.
template <bool kSigned>
[[gnu::always_inline]] inline __m512i Offset(int32_t four) {
  const __m512i v = _mm512_set1_epi32(four);
  if constexpr (kSigned) return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  return v;
}

// R (1..6) rows computed: a batch's last rows (and a decode step's one)
// take a tile of their own size instead of a padded 6-row one.  The
// offset sums (comp) follow the block's k4n groups.
template <int R, bool kSigned>
void PackedTile(const Int8PackedArgs& a, const int8_t* panel, int64_t r0, int64_t n0,
                int64_t cols) {
  static_assert(R >= 1 && R <= kInt8PackedRows);
  const int64_t k4n = (a.w.in + 3) / 4;  // the packed groups (ldx may be longer)
  const int32_t* comp = reinterpret_cast<const int32_t*>(panel + k4n * 256);
  const int64_t ldx = a.ldx;
  const __m512i z = _mm512_setzero_si512();
  __m512i c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
  __m512i c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
  __m512i c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
  const uint8_t* x = a.xu + r0 * ldx;
  for (int64_t q = 0; q < k4n; ++q) {
    const int8_t* p = panel + q * 256;
    const __m512i w0 = _mm512_load_si512(p);
    const __m512i w1 = _mm512_load_si512(p + 64);
    const __m512i w2 = _mm512_load_si512(p + 128);
    const __m512i w3 = _mm512_load_si512(p + 192);
    DSV4_INT8_ROW(0)
    DSV4_INT8_ROW(1)
    DSV4_INT8_ROW(2)
    DSV4_INT8_ROW(3)
    DSV4_INT8_ROW(4)
    DSV4_INT8_ROW(5)
  }
  alignas(64) int32_t exact[R][4][16];
  DSV4_INT8_SAVE(0)
  DSV4_INT8_SAVE(1)
  DSV4_INT8_SAVE(2)
  DSV4_INT8_SAVE(3)
  DSV4_INT8_SAVE(4)
  DSV4_INT8_SAVE(5)
  for (int j = 0; j < 4 && 16 * j < cols; ++j) {
    const int64_t count = cols - 16 * j < 16 ? cols - 16 * j : 16;
    const __mmask16 mask = static_cast<__mmask16>(count >= 16 ? 0xffff : (1u << count) - 1);
    const __m512 ws = _mm512_maskz_loadu_ps(mask, a.w.scales + n0 + 16 * j);
    for (int64_t r = 0; r < R; ++r) {
      const __m512 v = _mm512_cvtepi32_ps(
          _mm512_sub_epi32(_mm512_load_si512(exact[r][j]), _mm512_load_si512(comp + 16 * j)));
      const __m512 scaled = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(a.xs[r0 + r])), ws);
      StoreBf16x16(a.y + (r0 + r) * a.w.out + n0 + 16 * j, scaled, count);
    }
  }
}
#undef DSV4_INT8_ROW
#undef DSV4_INT8_SAVE

// Rows [row_begin, row_end) against one packed panel: 6-row tiles, the
// last rows in a tile of their own size.
template <bool kSigned>
void PackedRows(const Int8PackedArgs& a, const int8_t* panel, int64_t row_begin, int64_t row_end,
                int64_t n0, int64_t cols) {
  int64_t r = row_begin;
  for (; r + kInt8PackedRows <= row_end; r += kInt8PackedRows) {
    PackedTile<kInt8PackedRows, kSigned>(a, panel, r, n0, cols);
  }
  switch (row_end - r) {
    case 1:
      return PackedTile<1, kSigned>(a, panel, r, n0, cols);
    case 2:
      return PackedTile<2, kSigned>(a, panel, r, n0, cols);
    case 3:
      return PackedTile<3, kSigned>(a, panel, r, n0, cols);
    case 4:
      return PackedTile<4, kSigned>(a, panel, r, n0, cols);
    case 5:
      return PackedTile<5, kSigned>(a, panel, r, n0, cols);
    default:
      return;
  }
}

}  // namespace

void Int8OffsetRowsAvx512(const int8_t* x, int64_t k, int64_t ldx, int64_t row_begin,
                          int64_t row_end, uint8_t* xu) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t r = row_begin; r < row_end; ++r) {
    uint8_t* row = xu + r * ldx;
    const int8_t* src = x + r * k;
    for (int64_t i = 0; i < ldx; i += 64) {
      const __mmask64 in = i < k ? TailMask(k - i) : 0;  // past k: zeros
      const __m512i v = _mm512_maskz_loadu_epi8(in, src + (i < k ? i : 0));
      _mm512_mask_storeu_epi8(row + i, TailMask(ldx - i),
                              _mm512_maskz_mov_epi8(in, _mm512_xor_si512(v, flip)));
    }
  }
}

void Int8PackPanelBlockAvx512Vnni(const Int8Weight& w, int64_t col_begin, int8_t* block) {
  const int64_t col_end = col_begin + kInt8PackedCols < w.out ? col_begin + kInt8PackedCols : w.out;
  PackPanel(w, col_begin, col_end, block);
}

void Int8GemmAvx512VnniPacked(const Int8PackedArgs& a, int64_t row_begin, int64_t row_end,
                              int64_t col_begin, int64_t col_end, void* scratch) {
  const int8_t* panel;
  if (a.w.layout == Int8Layout::kPanels) {
    panel = a.w.codes + (col_begin / kInt8PackedCols) * Int8PanelBlockBytes(a.w.in);
  } else {
    // Always 4 vectors of 16 columns (absent ones zero): one micro-kernel.
    PackPanel(a.w, col_begin, col_end, static_cast<int8_t*>(scratch));
    panel = static_cast<const int8_t*>(scratch);
  }
  const int64_t cols = col_end - col_begin;
  if (a.x_signed) {
    PackedRows<true>(a, panel, row_begin, row_end, col_begin, cols);
  } else {
    PackedRows<false>(a, panel, row_begin, row_end, col_begin, cols);
  }
}

}  // namespace dsv4::kernels::cpu
