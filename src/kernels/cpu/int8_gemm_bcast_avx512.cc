// The broadcast W8A8 kernel of int8_gemm_cpu.h (AVX-512 VNNI).
//
// The packed prefill kernel (int8_gemm_avx512.cc) holds 64 weight columns in
// vectors and broadcasts activations, so it must first transpose every task's
// weights (O(N·K) per task, the bulk of the time at a few dozen rows).  This
// kernel swaps the roles: the activations are interleaved once per call
// (O(M·K)) and the weights are read where they lie ([out, in]) by 16-byte
// broadcasts (vbroadcasti32x4):
//
//   - An activation vector holds 4 rows x 16 consecutive k (one 128-bit lane
//     per row), so vpdpbusd against the broadcast 16 bytes of one weight row
//     leaves, in lane 4i + p, row i's partial sum over the k ≡ p (mod 4)
//     dword "phase".  The epilogue adds the 4 phases (exact INT32).
//   - The register tile is 4 vectors (16 rows) x 6 columns: 24 accumulators,
//     per 16 k 4 activation loads + 6 broadcasts for 24 vpdpbusd (fewer rows
//     take 3 x 8, 2 x 12 or 1 x 12).  A column tail reuses the tile over the
//     last full group and stores only the new columns.
//   - K is blocked (kKBlock) so a task's weight slice and its activation
//     chunk stay in L1/L2 across the row chunks; the INT32 accumulators live
//     in the task's scratch between blocks.  Each tile prefetches the weight
//     lines of the next tile; the first row chunk also sums the columns for
//     the offset below, from lines the tile is about to read.
//   - vpdpbusd takes unsigned x signed bytes: activations are offset (a + 128
//     = a XOR 0x80) and 128 · sum_k w[n, k] is subtracted.  K % 16 is padded:
//     zero activations, and the last weight bytes copied into a zeroed
//     scratch (never reading past a weight row).
//
// INT32 sums wrap modulo 2^32 and the true total fits INT32 (K <= 65,536,
// checked by the driver), so the result is exact in any order, and the FP32
// epilogue is the reference's expression: the same bits as every other path.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx512_bf16_store-inl.h"
#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/avx512_transpose-inl.h"
#include "kernels/cpu/int8_gemm_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

constexpr int64_t kStep = 16;         // k bytes per broadcast (one activation vector step)
constexpr int64_t kChunkBytes = 256;  // one step of a 16-row chunk: 4 vectors
constexpr int64_t kKBlock = 1024;     // k per block (measured 256-4096: flat from 1024)

static_assert(kInt8BcastRows == 16 && kInt8BcastMinCols >= 12);

[[gnu::always_inline]] inline __mmask64 TailMask(int64_t count) {
  return count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

int64_t Steps(int64_t k) { return (k + kStep - 1) / kStep; }

// One register tile: NV activation vectors (4 rows each) x NC columns over ns
// steps.  xa: the chunk at the first step; w: column 0 at the first step's k
// (row stride ldw); c: the accumulators, [column][64 lanes] with stride ldc;
// `init` starts from zero; columns below `skip` are not stored (already owned
// by the previous tile).  pf: the weights the next tile reads (NC rows of
// stride ldw), prefetched two lines per step, or null.
template <int NV, int NC>
void Tile(const uint8_t* xa, const int8_t* w, int64_t ldw, int64_t ns, int32_t* c, int64_t ldc,
          bool init, int skip, const int8_t* pf) {
  // An array with constant indices after unrolling: GCC keeps it in registers.
  __m512i acc[NV][NC];
#pragma GCC unroll 16
  for (int j = 0; j < NC; ++j) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      acc[v][j] = init ? _mm512_setzero_si512() : _mm512_load_si512(c + j * ldc + 16 * v);
    }
  }
  const int64_t pf_lines = pf != nullptr ? NC * ((kStep * ns + 63) / 64) : 0;
  for (int64_t s = 0; s < ns; ++s) {
    __m512i a[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) a[v] = _mm512_load_si512(xa + s * kChunkBytes + 64 * v);
    if (2 * s < pf_lines) {
      const int64_t l0 = 2 * s, l1 = 2 * s + 1;
      _mm_prefetch(reinterpret_cast<const char*>(pf + (l0 % NC) * ldw + (l0 / NC) * 64),
                   _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pf + (l1 % NC) * ldw + (l1 / NC) * 64),
                   _MM_HINT_T0);
    }
#pragma GCC unroll 16
    for (int j = 0; j < NC; ++j) {
      const __m512i b = _mm512_broadcast_i32x4(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + j * ldw + kStep * s)));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[v][j] = _mm512_dpbusd_epi32(acc[v][j], a[v], b);
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < NC; ++j) {
    if (j < skip) continue;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_si512(c + j * ldc + 16 * v, acc[v][j]);
  }
}

// sums[j] += the bytes of weight row j over [0, len), as 16 INT32 partials
// (4 independent chains: one would wait on vpdpbusd's latency).
void SumRows(const int8_t* w, int64_t ldw, int64_t rows, int64_t len, bool init, __m512i* sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t j = 0; j < rows; ++j) {
    const int8_t* row = w + j * ldw;
    __m512i v0 = init ? _mm512_setzero_si512() : sums[j];
    __m512i v1 = _mm512_setzero_si512(), v2 = v1, v3 = v1;
    int64_t b = 0;
    for (; b + 256 <= len; b += 256) {
      v0 = _mm512_dpbusd_epi32(v0, ones, _mm512_loadu_si512(row + b));
      v1 = _mm512_dpbusd_epi32(v1, ones, _mm512_loadu_si512(row + b + 64));
      v2 = _mm512_dpbusd_epi32(v2, ones, _mm512_loadu_si512(row + b + 128));
      v3 = _mm512_dpbusd_epi32(v3, ones, _mm512_loadu_si512(row + b + 192));
    }
    for (; b < len; b += 64) {
      v1 = _mm512_dpbusd_epi32(v1, ones, _mm512_maskz_loadu_epi8(TailMask(len - b), row + b));
    }
    sums[j] = _mm512_add_epi32(_mm512_add_epi32(v0, v1), _mm512_add_epi32(v2, v3));
  }
}

// One k block of one row chunk over all `cols` columns (cols >= NC), in tiles
// of NC.  sums: column sums to accumulate (first chunk only) or null; next:
// the weights read after this block (prefetched by the last tile) or null.
struct Block {
  const uint8_t* xa;   // the chunk at the block's first step
  const int8_t* w;     // column 0 at the block's first k
  int64_t ldw;         // weight row stride
  int64_t ns;          // steps
  int32_t* c;          // the chunk's accumulators (column 0)
  int64_t ldc;         // accumulator column stride (int32)
  int64_t cols;        // columns
  bool init;           // first block: start from zero
  __m512i* sums;       // column sums to accumulate, or null
  const int8_t* next;  // prefetched by the last tile, or null
};

template <int NV, int NC>
void Columns(const Block& b) {
  for (int64_t j = 0; j < b.cols; j += NC) {
    const int64_t start = std::min<int64_t>(j, b.cols - NC);
    if (b.sums != nullptr) {
      SumRows(b.w + j * b.ldw, b.ldw, std::min<int64_t>(NC, b.cols - j), kStep * b.ns, b.init,
              b.sums + j);
    }
    const int64_t j_next = j + NC;
    const int8_t* pf =
        j_next < b.cols ? b.w + std::min<int64_t>(j_next, b.cols - NC) * b.ldw : b.next;
    Tile<NV, NC>(b.xa, b.w + start * b.ldw, b.ldw, b.ns, b.c + start * b.ldc, b.ldc, b.init,
                 static_cast<int>(j - start), pf);
  }
}

// The widest tile for the chunk's vectors (4 rows each).
void RunBlock(int64_t vectors, const Block& b) {
  switch (vectors) {
    case 1:
      return Columns<1, 12>(b);
    case 2:
      return Columns<2, 12>(b);
    case 3:
      return Columns<3, 8>(b);
    default:
      return Columns<4, 6>(b);
  }
}

// Row sums of a chunk's accumulators for one column: lane 4i + p of vector v
// holds row 4v + i, phase p; returns lane r = row r.
__m512i ReducePhases(const int32_t* c) {
  const __m512i a0 = _mm512_load_si512(c), a1 = _mm512_load_si512(c + 16);
  const __m512i a2 = _mm512_load_si512(c + 32), a3 = _mm512_load_si512(c + 48);
  // Phases 0, 1 and 2, 3 of rows 0..7 (from a0, a1) in lanes 2r + t.
  const __m512i p01 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
  const __m512i p23 = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  const __m512i lo = _mm512_add_epi32(_mm512_permutex2var_epi32(a0, p01, a1),
                                      _mm512_permutex2var_epi32(a0, p23, a1));
  const __m512i hi = _mm512_add_epi32(_mm512_permutex2var_epi32(a2, p01, a3),
                                      _mm512_permutex2var_epi32(a2, p23, a3));
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(lo, even, hi),
                          _mm512_permutex2var_epi32(lo, odd, hi));
}

// y for one chunk (rows r0 .. r0 + rows) and the task's columns: exact sums
// minus the offset, then (float(acc) · sa) · sw as the reference, transposed
// 16 columns at a time into rows.
void StoreChunk(const Int8BcastArgs& a, const int32_t* c, int64_t ldc, const int32_t* comp,
                int64_t r0, int64_t rows, int64_t n0, int64_t cols) {
  const __m512 sa = _mm512_maskz_loadu_ps(TailMask16(rows), a.xs + r0);
  for (int64_t j0 = 0; j0 < cols; j0 += 16) {
    const int64_t count = std::min<int64_t>(16, cols - j0);
    __m512i r[16];
    for (int j = 0; j < 16; ++j) {
      if (j >= count) {
        r[j] = _mm512_setzero_si512();
        continue;
      }
      const __m512i exact =
          _mm512_sub_epi32(ReducePhases(c + (j0 + j) * ldc), _mm512_set1_epi32(comp[j0 + j]));
      const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(exact), sa),
                                     _mm512_set1_ps(a.w.scales[n0 + j0 + j]));
      r[j] = _mm512_castps_si512(v);
    }
    Transpose16x16(r);
    for (int64_t i = 0; i < rows; ++i) {
      StoreBf16x16(a.y + (r0 + i) * a.w.out + n0 + j0, _mm512_castsi512_ps(r[i]), count);
    }
  }
}

int64_t Align64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

int64_t Int8BcastActBytes(int64_t m, int64_t k) {
  return (m + kInt8BcastRows - 1) / kInt8BcastRows * Steps(k) * kChunkBytes;
}

void Int8BcastPackActivations(const int8_t* x, int64_t m, int64_t k, int64_t chunk_begin,
                              int64_t chunk_end, uint8_t* xt) {
  const int64_t steps = Steps(k);
  const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
  for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
    uint8_t* base = xt + chunk * steps * kChunkBytes;
    for (int64_t i = 0; i < kInt8BcastRows; ++i) {
      // Row i sits in lane i % 4 (16 bytes) of vector i / 4 of every step.
      uint8_t* dst = base + (i / 4) * 64 + (i % 4) * 16;
      const int64_t row = chunk * kInt8BcastRows + i;
      for (int64_t s = 0; s < steps; ++s) {
        // Rows past m read nothing (all-zero mask) and store zeros.
        const __mmask16 valid = row < m ? TailMask16(k - s * kStep) : 0;
        const __m128i v = _mm_maskz_loadu_epi8(valid, row < m ? x + row * k + s * kStep : x);
        _mm_store_si128(reinterpret_cast<__m128i*>(dst + s * kChunkBytes),
                        _mm_maskz_xor_epi32(0xf, _mm_maskz_mov_epi8(valid, bias), v));
      }
    }
  }
}

int64_t Int8BcastScratchBytes(int64_t rows, int64_t cols) {
  const int64_t chunks = (rows + kInt8BcastRows - 1) / kInt8BcastRows;
  return Align64(4 * 64 * chunks * cols) + 64 * cols + Align64(kStep * cols) + Align64(4 * cols);
}

void Int8GemmAvx512VnniBcast(const Int8BcastArgs& a, int64_t row_begin, int64_t row_end,
                             int64_t col_begin, int64_t col_end, void* scratch) {
  const int64_t k = a.w.in;
  const int64_t cols = col_end - col_begin;
  const int64_t steps = Steps(k), full = k / kStep;
  const int64_t chunk_begin = row_begin / kInt8BcastRows;
  const int64_t chunks = (row_end - row_begin + kInt8BcastRows - 1) / kInt8BcastRows;
  const int64_t ldc = 64 * chunks;
  // Scratch: accumulators [cols][chunks][64], column sums, K tail, offsets.
  uint8_t* bytes = static_cast<uint8_t*>(scratch);
  int32_t* acc = reinterpret_cast<int32_t*>(bytes);
  bytes += Align64(4 * ldc * cols);
  __m512i* sums = reinterpret_cast<__m512i*>(bytes);
  bytes += 64 * cols;
  int8_t* tail = reinterpret_cast<int8_t*>(bytes);
  bytes += Align64(kStep * cols);
  int32_t* comp = reinterpret_cast<int32_t*>(bytes);
  const int8_t* w = a.w.codes + col_begin * k;

  // Every row chunk over steps [s0, s0 + ns) of weights wb (row stride ldw);
  // the first chunk also sums the columns of the in-place blocks.
  const auto run = [&](int64_t s0, int64_t ns, const int8_t* wb, int64_t ldw, bool init,
                       bool in_place, const int8_t* next) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t rows = std::min<int64_t>(kInt8BcastRows, row_end - row_begin - 16 * c);
      const Block b{a.xt + ((chunk_begin + c) * steps + s0) * kChunkBytes,
                    wb,
                    ldw,
                    ns,
                    acc + 64 * c,
                    ldc,
                    cols,
                    init,
                    c == 0 && in_place ? sums : nullptr,
                    c + 1 < chunks ? wb : next};
      RunBlock((rows + 3) / 4, b);
    }
  };
  const int64_t block_steps = kKBlock / kStep;
  for (int64_t s0 = 0; s0 < full; s0 += block_steps) {
    const int64_t ns = std::min(block_steps, full - s0);
    const int8_t* next = s0 + ns < full ? w + kStep * (s0 + ns) : nullptr;
    run(s0, ns, w + kStep * s0, k, s0 == 0, true, next);
  }
  if (full < steps) {  // the last k % 16 bytes, zero padded
    std::memset(tail, 0, static_cast<size_t>(kStep * cols));
    for (int64_t j = 0; j < cols; ++j) {
      std::memcpy(tail + kStep * j, w + j * k + kStep * full, static_cast<size_t>(k % kStep));
    }
    run(full, 1, tail, kStep, full == 0, false, nullptr);
  }
  for (int64_t j = 0; j < cols; ++j) {
    int32_t sum = full > 0 ? _mm512_reduce_add_epi32(sums[j]) : 0;
    for (int64_t i = kStep * full; i < k; ++i) sum += w[j * k + i];
    comp[j] = static_cast<int32_t>(static_cast<uint32_t>(sum) << 7);  // 128 · sum, mod 2^32
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = row_begin + kInt8BcastRows * c;
    StoreChunk(a, acc + 64 * c, ldc, comp, r0, std::min<int64_t>(kInt8BcastRows, row_end - r0),
               col_begin, cols);
  }
}

}  // namespace dsv4::kernels::cpu
