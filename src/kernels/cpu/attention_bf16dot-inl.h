// Sparse attention with BF16 pair dot products (vdpbf16ps, AVX512-BF16), for
// ops_avx512.cc after ops_simd-inl.h (it reuses BlockSoftmax and the
// AVX-512 vector traits V).  docs/kernels.md "SparseAttention with BF16 dot
// products".
//
// Both products of the attention are of BF16 values: q·kv (query and kv row
// are BF16) and bf16(p)·kv (the probabilities are rounded to BF16 before
// P.V, as the reference does).  A BF16 product is exact in FP32, so
// vdpbf16ps, which adds two of them per FP32 lane, does the work of two
// FMAs on 32 BF16 values a load, where the FMA kernel widens 16 values per
// load and runs one product per lane.  Accumulation stays FP32 in a fixed
// order per head (only the order differs from the FMA kernel: the same
// error bound, docs/model.md "Attention paths"); inputs or products below
// FP32's normal range count as zero (the instruction's DAZ/FTZ), far below
// anything an attention output can show next to its 2^-126 ulp.
//
// Logits: lanes over dim, 32 values a chunk, two rows at a time (16
// independent chains for 8 heads, enough to cover the instruction's
// latency), one horizontal sum per (row, head) by the FMA kernel's tree
// (the pair's 16 at once, ReduceAdd16).
// P.V: rows in pairs j, j+1; their chunks interleaved 16 bits at a time
// (vpunpck{l,h}wd) make dword lanes (kv_j[d], kv_j+1[d]), dotted with the
// broadcast pair (p_j, p_j+1).  Within each 128-bit lane the unpacks take
// dims 8k..8k+3 (low) and 8k+4..8k+7 (high), so a chunk's accumulator is
// two FP32 vectors in that order, and vpackusdw of their BF16 bit patterns
// restores the natural order when the output is written.
#pragma once

#include "kernels/cpu/ops_simd-inl.h"

namespace dsv4::kernels::cpu {
namespace {

constexpr int64_t kBf16Chunk = 32;  // BF16 values per 64-byte chunk

// Chunk c of a dim-wide BF16 row (c < chunks), zero past dim; a null row
// (padding, probability 0) reads as zeros.
[[gnu::always_inline]] inline __m512i LoadChunk(const bf16* row, int64_t c, int64_t full,
                                                __mmask32 tail) {
  if (row == nullptr) return _mm512_setzero_si512();
  if (c < full) return _mm512_loadu_si512(row + c * kBf16Chunk);
  return _mm512_maskz_loadu_epi16(tail, row + c * kBf16Chunk);
}

// One group's working set: q as BF16 zero-padded to `chunks` chunks
// [G, dim_pad], acc in the unpacked order [G, dim_pad] FP32, block logits /
// probabilities pb [G, kBlock] FP32 and the probabilities as BF16 pp
// [G, kBlock].
template <int G>
struct Bf16HeadGroup {
  const bf16* const* rows;
  int64_t chunks, full, dim_pad;
  __mmask32 tail;
  const bf16* q;
  float* acc;
  float* pb;
  bf16* pp;
  float m[G], z[G], alpha[G];
};

// The horizontal sums of 16 accumulators at once, each by V::ReduceAdd's
// tree (lane i + lane i+8, then i + i+4, i + i+2, i + i+1: the same
// additions of the same values, so the same bits), in 45 instructions
// instead of 16 separate trees of 8.  Result lane 4m + l holds the sum of
// a[4l + m] (Bf16SumLane).
[[gnu::always_inline]] inline __m512 ReduceAdd16(const __m512* a) {
  __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {  // 256-bit halves: v_i + v_i+8
    b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xee));
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {  // 128-bit quarters: h_i + h_i+4
    c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0xdd));
  }
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {  // s_0 + s_2, s_1 + s_3
    const __m512d lo =
        _mm512_unpacklo_pd(_mm512_castps_pd(c[2 * k]), _mm512_castps_pd(c[2 * k + 1]));
    const __m512d hi =
        _mm512_unpackhi_pd(_mm512_castps_pd(c[2 * k]), _mm512_castps_pd(c[2 * k + 1]));
    d[k] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
constexpr int Bf16SumLane(int i) { return 4 * (i % 4) + i / 4; }

// Logits of kR rows (1 or 2) starting at entry j.
template <class V, int G, int kR>
[[gnu::always_inline]] inline void Bf16RowScores(Bf16HeadGroup<G>& hg, int64_t b0, int64_t j,
                                                 float scale) {
  __m512 s[kR][G];
  const bf16* row[kR];
#pragma GCC unroll 2
  for (int r = 0; r < kR; ++r) {
    row[r] = hg.rows[b0 + j + r];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) s[r][g] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < hg.chunks; ++c) {
    __m512i kv[kR];
#pragma GCC unroll 2
    for (int r = 0; r < kR; ++r) kv[r] = LoadChunk(row[r], c, hg.full, hg.tail);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512i qc = _mm512_loadu_si512(hg.q + g * hg.dim_pad + c * kBf16Chunk);
#pragma GCC unroll 2
      for (int r = 0; r < kR; ++r) {
        s[r][g] = _mm512_dpbf16_ps(s[r][g], (__m512bh)kv[r], (__m512bh)qc);
      }
    }
  }
  // Accumulator (r, g) at 2g + r of one batched reduction; unused slots zero.
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[2 * g + r] = s[r][g];
  }
  alignas(64) float sums[16];
  _mm512_store_ps(sums, _mm512_mul_ps(ReduceAdd16(acc), _mm512_set1_ps(scale)));
#pragma GCC unroll 2
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      hg.pb[g * kBlock + j + r] = row[r] == nullptr ? -INFINITY : sums[Bf16SumLane(2 * g + r)];
    }
  }
}

// The logits pass prefetches the rows this many entries ahead (PrefetchRow).
// BM_Attention/Decode, 640 rows from DRAM on 2 threads: 365 us without, 224-271
// us at 2, 4, 8 or 16 ahead, no distance separable from another; 16 is what
// every model figure of docs/performance.md "Attention with BF16 dot products"
// ran with.
constexpr int64_t kAttnRowsAhead = 16;

template <class V, int G>
void Bf16BlockScores(Bf16HeadGroup<G>& hg, int64_t b0, int64_t n, float scale, int64_t list_len) {
  int64_t j = 0;
  const int64_t bytes = hg.chunks * 64;
  for (; j + 2 <= n; j += 2) {
    const int64_t ahead = b0 + j + kAttnRowsAhead;
    if (ahead < list_len) PrefetchRow(hg.rows[ahead], bytes);
    if (ahead + 1 < list_len) PrefetchRow(hg.rows[ahead + 1], bytes);
    Bf16RowScores<V, G, 2>(hg, b0, j, scale);
  }
  if (j < n) Bf16RowScores<V, G, 1>(hg, b0, j, scale);
}

// The block's rounded probabilities (pb, FP32 values already on the BF16
// grid, 0 past n) as BF16: their top halves, in order.
template <int G>
void Bf16BlockProbabilities(Bf16HeadGroup<G>& hg) {
  for (int g = 0; g < G; ++g) {
    for (int64_t j = 0; j < kBlock; j += 16) {
      const __m512i bits = _mm512_loadu_si512(hg.pb + g * kBlock + j);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hg.pp + g * kBlock + j),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
    }
  }
}

// acc = acc·alpha + Σ_j bf16(p_j)·kv_j per chunk, rows in pairs (a missing
// partner of an odd block end reads as zeros with probability 0).
template <int G>
void Bf16BlockPv(Bf16HeadGroup<G>& hg, int64_t b0, int64_t n) {
  for (int64_t c = 0; c < hg.chunks; ++c) {
    __m512 lo[G], hi[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) lo[g] = hi[g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 2) {
      const __m512i a = LoadChunk(hg.rows[b0 + j], c, hg.full, hg.tail);
      const __m512i b =
          j + 1 < n ? LoadChunk(hg.rows[b0 + j + 1], c, hg.full, hg.tail) : _mm512_setzero_si512();
      const __m512i l = _mm512_unpacklo_epi16(a, b), h = _mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        int32_t pair;
        __builtin_memcpy(&pair, hg.pp + g * kBlock + j, sizeof pair);
        const __m512i p = _mm512_set1_epi32(pair);
        lo[g] = _mm512_dpbf16_ps(lo[g], (__m512bh)l, (__m512bh)p);
        hi[g] = _mm512_dpbf16_ps(hi[g], (__m512bh)h, (__m512bh)p);
      }
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      float* ag = hg.acc + g * hg.dim_pad + c * kBf16Chunk;
      const __m512 alpha = _mm512_set1_ps(hg.alpha[g]);
      _mm512_storeu_ps(ag, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(ag), alpha), lo[g]));
      _mm512_storeu_ps(ag + 16,
                       _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(ag + 16), alpha), hi[g]));
    }
  }
}

// o = bf16(acc / Z), the unpacked halves packed back into dim order.
template <class V, int G>
void Bf16StoreOutputs(const AttnArgs& a, const Bf16HeadGroup<G>& hg, int64_t t, int64_t h0) {
  for (int g = 0; g < G; ++g) {
    const __m512 zv = _mm512_set1_ps(hg.z[g] + expf(a.sink[h0 + g] - hg.m[g]));
    bf16* out = a.o + (t * a.heads + h0 + g) * a.dim;
    for (int64_t c = 0; c < hg.chunks; ++c) {
      const float* ag = hg.acc + g * hg.dim_pad + c * kBf16Chunk;
      const __m512i lo = _mm512_srli_epi32(
          _mm512_castps_si512(V::RoundBf16(_mm512_div_ps(_mm512_loadu_ps(ag), zv))), 16);
      const __m512i hi = _mm512_srli_epi32(
          _mm512_castps_si512(V::RoundBf16(_mm512_div_ps(_mm512_loadu_ps(ag + 16), zv))), 16);
      const __m512i packed = _mm512_packus_epi32(lo, hi);
      if (c < hg.full) {
        _mm512_storeu_si512(out + c * kBf16Chunk, packed);
      } else {
        _mm512_mask_storeu_epi16(out + c * kBf16Chunk, hg.tail, packed);
      }
    }
  }
}

template <class V, int G>
void Bf16AttendGroup(const AttnArgs& a, int64_t t, int64_t h0, float* scratch) {
  Bf16HeadGroup<G> hg;
  hg.rows = a.kv_rows + t * a.list_len;
  hg.full = a.dim / kBf16Chunk;
  hg.chunks = (a.dim + kBf16Chunk - 1) / kBf16Chunk;
  hg.dim_pad = hg.chunks * kBf16Chunk;
  hg.tail = static_cast<__mmask32>((uint64_t{1} << (a.dim % kBf16Chunk)) - 1);
  hg.acc = scratch;
  hg.pb = hg.acc + G * hg.dim_pad;
  hg.pp = reinterpret_cast<bf16*>(hg.pb + G * kBlock);
  bf16* q = hg.pp + G * kBlock;
  hg.q = q;
  for (int g = 0; g < G; ++g) {
    const bf16* qh = a.q + (t * a.heads + h0 + g) * a.dim;
    for (int64_t d = 0; d < hg.dim_pad; ++d) {
      q[g * hg.dim_pad + d] = d < a.dim ? qh[d] : bf16{};
      hg.acc[g * hg.dim_pad + d] = 0.0f;
    }
    hg.m[g] = -INFINITY;
    hg.z[g] = 0.0f;
  }
  for (int64_t b0 = 0; b0 < a.list_len; b0 += kBlock) {
    const int64_t n = MinI(kBlock, a.list_len - b0);
    Bf16BlockScores<V, G>(hg, b0, n, a.scale, a.list_len);
    for (int g = 0; g < G; ++g) {
      BlockSoftmax<V>(hg.pb + g * kBlock, n, hg.m[g], hg.alpha[g], hg.z[g]);
    }
    Bf16BlockProbabilities<G>(hg);
    Bf16BlockPv<G>(hg, b0, n);
  }
  Bf16StoreOutputs<V, G>(a, hg, t, h0);
}

// attend_heads_bf16dot (ops_cpu.h): the same grouping as AttendHeads.
template <class V>
void AttendHeadsBf16Dot(const AttnArgs& a, int64_t t, int64_t h_begin, int64_t h_end,
                        float* scratch) {
  int64_t h = h_begin;
  for (; h + 8 <= h_end; h += 8) Bf16AttendGroup<V, 8>(a, t, h, scratch);
  for (; h + 4 <= h_end; h += 4) Bf16AttendGroup<V, 4>(a, t, h, scratch);
  for (; h < h_end; ++h) Bf16AttendGroup<V, 1>(a, t, h, scratch);
}

}  // namespace
}  // namespace dsv4::kernels::cpu
