// Dense GEMMs (BF16 or FP32 weights, or FP8 weights whose values are exact
// BF16), written once for every vector width V (gemm_simd_common-inl.h).
// Lanes run over the whole K (chunks of 128 in order, a zero-padded tail),
// and each output is reduced once by the panel tree at the end.  The tiled
// path and the one-row DenseGemv run the same per-element chain.
#pragma once

#include <utility>

#include "kernels/cpu/gemm_simd_common-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// Up to 128 weights of one row -> ceil(count / kLanes) vectors, zero padded.
// The unrolled loop keeps every index constant, so `out` can live in
// registers (DenseGemv feeds it straight to the FMAs); a loop bound of
// count / kLanes plus a tail vector at a variable index put it on the stack
// (AVX-512 BF16 GEMV 1.2x slower).
template <class V, typename W>
[[gnu::always_inline]] inline void LoadDenseChunk(const W* w, int64_t count, typename V::F* out) {
  constexpr int64_t kL = V::kLanes;
#pragma GCC unroll 16
  for (int v = 0; v < kVecs<V>; ++v) {
    if (kL * v >= count) break;
    if constexpr (sizeof(W) == 2) {
      out[v] = V::LoadBf16Upto(w + kL * v, count - kL * v);
    } else {
      out[v] = V::LoadUpto(w + kL * v, count - kL * v);
    }
  }
}

// Lane vectors (rows r..r + R, columns c..c + C) += the chunk's products:
// R x C chains side by side in registers, each the per-element chain of the
// one-row loop below (same order, same bits), so the FMA latency hides
// behind independent chains.  Each step loads C weight and R activation
// vectors for R·C FMAs.
template <class V, int kNumVecs, int R, int C>
[[gnu::always_inline]] inline void DenseRegisterTile(const typename V::F (*wdec)[kVecs<V>],
                                                     int64_t c, const float* x, int64_t ldx,
                                                     int64_t nv,
                                                     typename V::F (*lanes)[V::kLanes]) {
  typename V::F acc[R][C];
#pragma GCC unroll 16
  for (int i = 0; i < R * C; ++i) acc[i / C][i % C] = lanes[i / C][c + i % C];
#pragma GCC unroll 8
  for (int64_t v = 0; v < (kNumVecs > 0 ? kNumVecs : nv); ++v) {
    typename V::F w[C];
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) w[j] = wdec[c + j][v];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const typename V::F xv = V::Load(x + i * ldx + V::kLanes * v);
#pragma GCC unroll 4
      for (int j = 0; j < C; ++j) acc[i][j] = V::Fma(w[j], xv, acc[i][j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R * C; ++i) lanes[i / C][c + i % C] = acc[i / C][i % C];
}

// Lane vector (row, column) += the chunk's products, for rows [0, mt) of a
// tile (x: row 0's chunk, row stride ldx; num_vecs vectors, zero padded).
// With V::kPairRows (AVX-512: 32 registers) groups of 4 rows run 4 x 4
// register tiles (16 independent chains where row pairs had 2 per column:
// 1.05-1.1x on the BF16-as-FP32 GEMM alone; most of that kernel's gain came
// from the decode's prefetch, DenseDecoder), then rows in pairs, each weight
// load feeding two rows' FMAs; the per-element chain is the same for every
// path.  kNumVecs > 0 fixes the vector count at compile time
// (full chunks).
template <class V, int kNumVecs>
void DenseTileChunk(const typename V::F (*wdec)[kVecs<V>], int64_t nc, const float* x, int64_t ldx,
                    int64_t num_vecs, int64_t mt, typename V::F (*lanes)[V::kLanes]) {
  const int64_t nv = kNumVecs > 0 ? kNumVecs : num_vecs;
  int64_t r = 0;
  if constexpr (V::kPairRows) {
    for (; r + 4 <= mt; r += 4) {
      int64_t c = 0;
      for (; c + 4 <= nc; c += 4) {
        DenseRegisterTile<V, kNumVecs, 4, 4>(wdec, c, x + r * ldx, ldx, nv, lanes + r);
      }
      for (; c < nc; ++c) {
        DenseRegisterTile<V, kNumVecs, 4, 1>(wdec, c, x + r * ldx, ldx, nv, lanes + r);
      }
    }
    for (; r + 2 <= mt; r += 2) {
      const XBlock<V> xa(x + r * ldx), xb(x + (r + 1) * ldx);
      for (int64_t c = 0; c < nc; ++c) {
        typename V::F la = lanes[r][c], lb = lanes[r + 1][c];
#pragma GCC unroll 16
        for (int64_t v = 0; v < nv; ++v) {
          la = V::Fma(wdec[c][v], xa[v], la);
          lb = V::Fma(wdec[c][v], xb[v], lb);
        }
        lanes[r][c] = la;
        lanes[r + 1][c] = lb;
      }
    }
  }
  for (; r < mt; ++r) {
    const XBlock<V> xa(x + r * ldx);
    for (int64_t c = 0; c < nc; ++c) {
      typename V::F la = lanes[r][c];
#pragma GCC unroll 16
      for (int64_t v = 0; v < nv; ++v) la = V::Fma(wdec[c][v], xa[v], la);
      lanes[r][c] = la;
    }
  }
}

// decode(col, k0, count, out, ahead) yields up to 128 weights of column col
// from k0 on, zero padded to whole vectors, and prefetches: with ahead > 0
// the same chunk of column col + ahead (the few-row walk's next pair), with
// ahead == kNextChunk column col's next chunk, into the L2 (the tiles, which
// sweep a panel chunk by chunk and reuse it for every row).  The tiles
// prefetched the next panel's chunk until 2026-12-05: 16 rows of a multiple
// of 4 KiB apart, twice over, in the same L1 sets, so most of it was evicted
// before use (docs/performance.md "Dense tiles: 4 x 4 registers, the next
// chunk prefetched").
constexpr int64_t kNextChunk = 0;
template <class V, typename Decode>
void DensePanels(const DenseGemmArgs& a, const Decode& decode, const Tile& t) {
  constexpr int64_t kP = V::kLanes;
  constexpr int kNv = kVecs<V>;
  alignas(sizeof(typename V::F)) typename V::F wdec[kP][kNv];
  alignas(sizeof(typename V::F)) typename V::F lanes[kDenseMTile][kP];
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kDenseMTile) {
    const int64_t mt = Min(kDenseMTile, t.row_end - m0);
    for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
      const int64_t n0 = p * kP;
      const int64_t nc = Min(kP, a.n - n0);
      for (int64_t r = 0; r < mt; ++r) {
#pragma GCC unroll 16
        for (int c = 0; c < kP; ++c) lanes[r][c] = V::Zero();
      }
      for (int64_t k0 = 0; k0 < a.k; k0 += kChunk) {
        const int64_t count = Min(kChunk, a.k - k0);
        for (int64_t c = 0; c < nc; ++c) decode(n0 + c, k0, count, wdec[c], kNextChunk);
        const float* xc = a.x + m0 * a.ldx + k0;
        if (count == kChunk) {
          DenseTileChunk<V, kNv>(wdec, nc, xc, a.ldx, kNv, mt, lanes);
        } else {
          DenseTileChunk<V, 0>(wdec, nc, xc, a.ldx, (count + kP - 1) / kP, mt, lanes);
        }
      }
      for (int64_t r = 0; r < mt; ++r) {
        const int64_t y0 = (m0 + r) * a.ldy + n0;
        StorePanel<V>(V::ReducePanel(lanes[r]), nc, a.y_bf16 ? a.y_bf16 + y0 : nullptr,
                      a.y_f32 ? a.y_f32 + y0 : nullptr);
      }
    }
  }
}

// The few-row walks' panel loop: for each panel of tile t, walk(n0, nc,
// lanes) fills rows 0..M's lane chains for its nc columns from n0 (the
// rest stay zero), then each row's panel is reduced and stored.
template <class V, int M, typename Walk>
[[gnu::always_inline]] inline void DenseRowPanels(const DenseGemmArgs& a, const Tile& t,
                                                  const Walk& walk) {
  constexpr int64_t kP = V::kLanes;
  for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
    const int64_t n0 = p * kP;
    const int64_t nc = Min(kP, a.n - n0);
    alignas(sizeof(typename V::F)) typename V::F lanes[M][kP];
    for (int r = 0; r < M; ++r) {
      for (int64_t c = nc; c < kP; ++c) lanes[r][c] = V::Zero();
    }
    walk(n0, nc, lanes);
    for (int r = 0; r < M; ++r) {
      const int64_t y0 = (t.row_begin + r) * a.ldy + n0;
      StorePanel<V>(V::ReducePanel(lanes[r]), nc, a.y_bf16 ? a.y_bf16 + y0 : nullptr,
                    a.y_f32 ? a.y_f32 + y0 : nullptr);
    }
  }
}

// Dense GEMV (one row; FP8-as-BF16 weights also 2..4, a verify step's
// rows, which BF16 and FP32 weights give DenseGemvColumns below) column by column
// instead of chunk by chunk: each column's weights decoded into registers
// and fed to every row's lane chain, which runs over the whole K in the
// same order as DenseTileChunk (so the same bits), and a panel's weights
// read as one contiguous stream.  Two columns at a time give the
// out-of-order core 2·M independent FMA chains.  It prefetches the next
// pair of columns (2 ahead; from the panel's last pair, the next panel's
// first): prefetching the next panel instead left every task's first
// panel, 16 columns, to the hardware prefetchers alone, which cost the
// compressor's small projections (64 panels, claimed in ~15 tasks) a
// sixth of their time at decode (docs/performance.md "Dense GEMV: the next
// pair prefetched").  The tiled path walks a chunk of 16 rows `k` apart at a
// time: for the bench head's 8 KB rows at M = 2 that made a 2-row head
// 1.25x a 1-row one (docs/performance.md "Dense few-row walk").
template <class V, int M, typename Decode>
void DenseGemv(const DenseGemmArgs& a, const Decode& decode, const Tile& t) {
  constexpr int64_t kP = V::kLanes;
  constexpr int64_t kNextPair = 2;  // prefetch distance in columns
  const float* x = a.x + t.row_begin * a.ldx;
  const auto walk = [&](int64_t n0, int64_t nc, typename V::F(*lanes)[kP])
      __attribute__((always_inline)) {
    int64_t c = 0;
    for (; c + 2 <= nc; c += 2) {
      typename V::F la[M], lb[M];
      for (int r = 0; r < M; ++r) la[r] = lb[r] = V::Zero();
      for (int64_t k0 = 0; k0 < a.k; k0 += kChunk) {
        const int64_t count = Min(kChunk, a.k - k0);
        typename V::F wa[kVecs<V>], wb[kVecs<V>];
        decode(n0 + c, k0, count, wa, kNextPair);
        decode(n0 + c + 1, k0, count, wb, kNextPair);
        const int64_t nv = (count + kP - 1) / kP;
#pragma GCC unroll 8
        for (int64_t v = 0; v < nv; ++v) {
#pragma GCC unroll 4
          for (int r = 0; r < M; ++r) {
            const typename V::F xv = V::Load(x + r * a.ldx + k0 + kP * v);
            la[r] = V::Fma(wa[v], xv, la[r]);
            lb[r] = V::Fma(wb[v], xv, lb[r]);
          }
        }
      }
      for (int r = 0; r < M; ++r) {
        lanes[r][c] = la[r];
        lanes[r][c + 1] = lb[r];
      }
    }
    if (c < nc) {
      typename V::F la[M];
      for (int r = 0; r < M; ++r) la[r] = V::Zero();
      for (int64_t k0 = 0; k0 < a.k; k0 += kChunk) {
        const int64_t count = Min(kChunk, a.k - k0);
        typename V::F wa[kVecs<V>];
        decode(n0 + c, k0, count, wa, kNextPair);
        const int64_t nv = (count + kP - 1) / kP;
#pragma GCC unroll 8
        for (int64_t v = 0; v < nv; ++v) {
#pragma GCC unroll 4
          for (int r = 0; r < M; ++r) {
            la[r] = V::Fma(wa[v], V::Load(x + r * a.ldx + k0 + kP * v), la[r]);
          }
        }
      }
      for (int r = 0; r < M; ++r) lanes[r][c] = la[r];
    }
  };
  DenseRowPanels<V, M>(a, t, walk);
}

// f(std::integral_constant<int, M>) for a tile of M = rows in [kFirst, 4]
// where the ISA's policy takes the few-row walks (V::kFewRowPaths); false
// (nothing run) otherwise.
template <class V, int kFirst, typename F>
[[gnu::always_inline]] inline bool ForFewRows(int64_t rows, const F& f) {
  if constexpr (V::kFewRowPaths) {
    return [&]<int... I>(std::integer_sequence<int, I...>) {
      return ((rows == kFirst + I && (f(std::integral_constant<int, kFirst + I>{}), true)) || ...);
    }
    (std::make_integer_sequence<int, 5 - kFirst>{});
  }
  return false;
}

// Tiles of 1-4 rows take DenseGemv where the ISA's policy says it pays.
template <class V, typename Decode>
void DenseDispatch(const DenseGemmArgs& a, const Decode& decode, const Tile& t) {
  const auto gemv = [&](auto m) { DenseGemv<V, decltype(m)::value>(a, decode, t); };
  if (!ForFewRows<V, 1>(t.row_end - t.row_begin, gemv)) DensePanels<V>(a, decode, t);
}

// Where column col's elements from k0 (a multiple of kChunk) on lie: in
// rows, or in the BF16 pair layout (kernels/gemm.h: the column's chunks
// alternate with its partner's), where a chunk's kChunk elements are
// contiguous too.
[[gnu::always_inline]] inline int64_t DenseChunkAt(bool pairs, int64_t k, int64_t col, int64_t k0) {
  return pairs ? (col >> 1) * 2 * k + 2 * k0 + (col & 1) * kChunk : col * k + k0;
}

// Decoder of a BF16 or FP32 weight.
template <class V, typename W>
auto DenseDecoder(const DenseGemmArgs& a, const W* w) {
  return [&a, w](int64_t col, int64_t k0, int64_t count, typename V::F* out, int64_t ahead) {
    const bool pairs = sizeof(W) == 2 && a.w_pairs;  // FP32 weights stay in rows
    if (ahead == kNextChunk) {
      if (k0 + kChunk < a.k) {
        PrefetchL2(w + DenseChunkAt(pairs, a.k, col, k0 + kChunk),
                   kChunk * static_cast<int64_t>(sizeof(W)));
      }
    } else if (col + ahead < a.n) {
      Prefetch(w + DenseChunkAt(pairs, a.k, col + ahead, k0),
               count * static_cast<int64_t>(sizeof(W)));
    }
    LoadDenseChunk<V>(w + DenseChunkAt(pairs, a.k, col, k0), count, out);
  };
}

// Vector v of a chunk of count weights at p, zero padded past count (a
// whole vector unmasked where the chunk is whole).
template <class V, typename W>
[[gnu::always_inline]] inline typename V::F LoadDenseVector(const W* p, int64_t v, int64_t count) {
  const int64_t at = V::kLanes * v;
  if constexpr (sizeof(W) == 2) {
    return count == kChunk ? V::LoadBf16(p + at) : V::LoadBf16Upto(p + at, count - at);
  } else {
    return count == kChunk ? V::Load(p + at) : V::LoadUpto(p + at, count - at);
  }
}

// acc[r][j] += vector v of column j's chunk wc[j] times row r's at x.
template <class V, int M, int C, typename W>
[[gnu::always_inline]] inline void DenseColumnsStep(const W* const (&wc)[C], int64_t v,
                                                    int64_t count, const float* x, int64_t ldx,
                                                    typename V::F (&acc)[M][C]) {
  typename V::F wv[C];
#pragma GCC unroll 4
  for (int j = 0; j < C; ++j) wv[j] = LoadDenseVector<V>(wc[j], v, count);
#pragma GCC unroll 4
  for (int r = 0; r < M; ++r) {
    const typename V::F xv = V::Load(x + r * ldx + V::kLanes * v);
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) acc[r][j] = V::Fma(wv[j], xv, acc[r][j]);
  }
}

// Columns col..col + C of a BF16 or FP32 weight against rows 0..M of x:
// lanes[r][c + j] = row r's lane chains for column col + j.  Each chunk's
// vectors are loaded as the walk reaches them, one per column, and fed to
// every row's chain of that column: M·C independent chains, each in
// DenseTileChunk's per-element order (so the same bits).  Each chunk
// prefetches the same chunk C columns on (the walk's next step).
template <class V, int M, int C, typename W>
[[gnu::always_inline]] inline void DenseColumns(const DenseGemmArgs& a, const W* w, const float* x,
                                                int64_t col, int64_t c,
                                                typename V::F (*lanes)[V::kLanes]) {
  constexpr int64_t kP = V::kLanes;
  const bool pairs = sizeof(W) == 2 && a.w_pairs;  // FP32 weights stay in rows
  typename V::F acc[M][C];
#pragma GCC unroll 16
  for (int i = 0; i < M * C; ++i) acc[i / C][i % C] = V::Zero();
  for (int64_t k0 = 0; k0 < a.k; k0 += kChunk) {
    const int64_t count = Min(kChunk, a.k - k0);
    const W* wc[C];
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) {
      wc[j] = w + DenseChunkAt(pairs, a.k, col + j, k0);
      if (col + j + C < a.n) {
        Prefetch(w + DenseChunkAt(pairs, a.k, col + j + C, k0),
                 count * static_cast<int64_t>(sizeof(W)));
      }
    }
    if (count == kChunk) {
#pragma GCC unroll 8
      for (int v = 0; v < kVecs<V>; ++v) DenseColumnsStep<V>(wc, v, kChunk, x + k0, a.ldx, acc);
    } else {
      for (int64_t v = 0; v * kP < count; ++v)
        DenseColumnsStep<V>(wc, v, count, x + k0, a.ldx, acc);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < M * C; ++i) lanes[i / C][c + i % C] = acc[i / C][i % C];
}

// The dense GEMV of 2..4 rows (a verify step's, or a batch's) over BF16 or
// FP32 weights: four columns at a time (DenseColumns; a leftover 2 and 1),
// 4·M chains, no column's chunk held whole in registers.  Against
// DenseGemv (two columns, each chunk decoded whole: 2·M chains) the bench
// head streams from DRAM 2-8 % faster at 2 rows and 1.9x at 4; one row
// keeps DenseGemv, where four columns (two streams in the pair layout)
// read the head 1-19 % slower in 5 runs (docs/performance.md "Dense GEMV:
// four columns for a verify's rows").
template <class V, int M, typename W>
void DenseGemvColumns(const DenseGemmArgs& a, const W* w, const Tile& t) {
  const float* x = a.x + t.row_begin * a.ldx;
  const auto walk = [&](int64_t n0, int64_t nc, typename V::F(*lanes)[V::kLanes])
      __attribute__((always_inline)) {
    int64_t c = 0;
    for (; c + 4 <= nc; c += 4) DenseColumns<V, M, 4>(a, w, x, n0 + c, c, lanes);
    if (c + 2 <= nc) {
      DenseColumns<V, M, 2>(a, w, x, n0 + c, c, lanes);
      c += 2;
    }
    if (c < nc) DenseColumns<V, M, 1>(a, w, x, n0 + c, c, lanes);
  };
  DenseRowPanels<V, M>(a, t, walk);
}

// BF16 or FP32 weights: a tile of one row takes DenseGemv, of 2-4 rows
// DenseGemvColumns where the ISA's policy says they pay, more rows the
// tiled path.
template <class V, typename W>
void DenseDispatchColumns(const DenseGemmArgs& a, const W* w, const Tile& t) {
  const auto decode = DenseDecoder<V>(a, w);
  const auto gemv = [&](auto m) {
    constexpr int kM = decltype(m)::value;
    if constexpr (kM == 1) {
      DenseGemv<V, 1>(a, decode, t);
    } else {
      DenseGemvColumns<V, kM>(a, w, t);
    }
  };
  if (!ForFewRows<V, 1>(t.row_end - t.row_begin, gemv)) DensePanels<V>(a, decode, t);
}

template <class V>
void DenseGemmPanels(const DenseGemmArgs& a, const Tile& t) {
  if (a.w_fp8 != nullptr) {
    // w = (code·2^-8)·(scale·2^8): both factors exact, so one rounding of
    // code·scale, which the caller guarantees is exact: the BF16 weight.
    const Fp8Weight& w = *a.w_fp8;
    const int64_t ld_scale = w.in / 128;
    DenseDispatch<V>(
        a,
        [&](int64_t col, int64_t k0, int64_t, typename V::F* out, int64_t ahead) {
          const uint8_t* p = w.codes + col * w.in + k0;
          if (ahead == kNextChunk) {
            if (k0 + kChunk < w.in) PrefetchL2(p + kChunk, 128);
          } else if (col + ahead < w.out) {
            Prefetch(p + ahead * w.in, 128);
          }
          V::DecodeFp8Block(p, out);
          const typename V::F s =
              V::Set1(E8M0Value(w.scales[(col / 128) * ld_scale + k0 / 128]) * 256.0f);
#pragma GCC unroll 16
          for (int v = 0; v < kVecs<V>; ++v) out[v] = V::Mul(out[v], s);
        },
        t);
  } else if (a.w_bf16 != nullptr) {
    DenseDispatchColumns<V>(a, a.w_bf16, t);
  } else {
    DenseDispatchColumns<V>(a, a.w_f32, t);
  }
}

}  // namespace
}  // namespace dsv4::kernels::cpu
