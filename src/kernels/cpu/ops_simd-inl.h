// Vector-width-generic bodies of the ops_cpu.h kernels, instantiated once per
// ISA by ops_avx2.cc and ops_avx512.cc with their vector type V.  Everything
// here has internal linkage (anonymous namespace): each ISA gets its own copy.
//
// V provides: F (register type), kLanes, Zero, Set1, Load, Store, LoadBf16,
// RoundBf16 (RNE, NaN-preserving), StoreBf16 (rounds), Add, Sub, Mul, Div, Fma
// (a*b + c fused), Max, Floor, ScalePow2 (y * 2^n), ZeroBelow (v where
// x >= limit, else 0), ReduceAdd (fixed tree), ReduceMax.
// No <algorithm>/<cmath>: only extern libm calls (expf, sqrtf), which are
// ISA-neutral.
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernels/cpu/ops_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

inline int64_t MinI(int64_t a, int64_t b) { return a < b ? a : b; }
inline float MaxF(float a, float b) { return a < b ? b : a; }

// Local copies of tensor/numeric.h's conversions: those are inline functions
// with external linkage, which this ISA-specific file must not instantiate.
inline float ToF32(bf16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline float RoundToBf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u | 0x00400000u) & 0xffff0000u;
  } else {
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  }
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// Loads n < kLanes BF16 values, zero-filling the rest.
template <class V>
typename V::F LoadBf16Tail(const bf16* p, int64_t n) {
  bf16 buf[V::kLanes] = {};
  for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
  return V::LoadBf16(buf);
}

template <class V>
typename V::F LoadF32Tail(const float* p, int64_t n) {
  float buf[V::kLanes] = {};
  for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
  return V::Load(buf);
}

template <class V>
void StoreBf16Tail(bf16* p, typename V::F v, int64_t n) {
  bf16 buf[V::kLanes];
  V::StoreBf16(buf, v);
  for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
}

// sum a[i]*b[i] with four lane-vector accumulators over blocks of 4*kLanes,
// leftover whole vectors and a zero-padded tail into the first one, then
// (a0 + a1) + (a2 + a3) and ReduceAdd.  A fixed order for each n.
template <class V, class LoadA, class LoadATail, class LoadB, class LoadBTail>
float Dot4(int64_t n, LoadA load_a, LoadATail load_a_tail, LoadB load_b, LoadBTail load_b_tail) {
  constexpr int64_t L = V::kLanes;
  typename V::F acc0 = V::Zero(), acc1 = V::Zero(), acc2 = V::Zero(), acc3 = V::Zero();
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    acc0 = V::Fma(load_a(i), load_b(i), acc0);
    acc1 = V::Fma(load_a(i + L), load_b(i + L), acc1);
    acc2 = V::Fma(load_a(i + 2 * L), load_b(i + 2 * L), acc2);
    acc3 = V::Fma(load_a(i + 3 * L), load_b(i + 3 * L), acc3);
  }
  for (; i + L <= n; i += L) acc0 = V::Fma(load_a(i), load_b(i), acc0);
  if (i < n) acc0 = V::Fma(load_a_tail(i, n - i), load_b_tail(i, n - i), acc0);
  return V::ReduceAdd(V::Add(V::Add(acc0, acc1), V::Add(acc2, acc3)));
}

template <class V>
float SumSquaresBf16(const bf16* x, int64_t n) {
  auto load = [x](int64_t i) { return V::LoadBf16(x + i); };
  auto tail = [x](int64_t i, int64_t m) { return LoadBf16Tail<V>(x + i, m); };
  return Dot4<V>(n, load, tail, load, tail);
}

template <class V>
float DotBf16F32(const bf16* v, const float* f, int64_t n) {
  return Dot4<V>(
      n, [v](int64_t i) { return V::LoadBf16(v + i); },
      [v](int64_t i, int64_t m) { return LoadBf16Tail<V>(v + i, m); },
      [f](int64_t i) { return V::Load(f + i); },
      [f](int64_t i, int64_t m) { return LoadF32Tail<V>(f + i, m); });
}

// DotRowsBf16F32 (below) over the columns [c0, c1) only, its accumulators
// carried between calls in `state` (R x 4 vectors of kLanes floats): FIRST
// (c0 == 0) starts them at zero, LAST (c1 == n) finishes into out (the
// one-vector steps, the tail, the sum); other calls leave them in state.  c0
// and, below n, c1 are multiples of 4·kLanes, the full walk's step, so calls
// over consecutive ranges perform its operations in its order: the same bits.
template <class V, int R, bool FIRST, bool LAST>
void DotRowsBf16F32Part(const bf16* v0, int64_t ldv, const float* f, int64_t n, int64_t c0,
                        int64_t c1, float* state, float* out) {
  constexpr int64_t L = V::kLanes;
  using F = typename V::F;
  F acc[R][4];
#pragma GCC unroll 16
  for (int j = 0; j < 4 * R; ++j) {
    if constexpr (FIRST) {
      acc[j / 4][j % 4] = V::Zero();
    } else {
      acc[j / 4][j % 4] = V::Load(state + j * L);
    }
  }
  int64_t i = c0;
  for (; i + 4 * L <= c1; i += 4 * L) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const F fk = V::Load(f + i + k * L);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[r][k] = V::Fma(V::LoadBf16(v0 + r * ldv + i + k * L), fk, acc[r][k]);
      }
    }
  }
  if constexpr (!LAST) {
#pragma GCC unroll 16
    for (int j = 0; j < 4 * R; ++j) V::Store(state + j * L, acc[j / 4][j % 4]);
    return;
  }
  for (; i + L <= n; i += L) {
    const F fi = V::Load(f + i);
    for (int r = 0; r < R; ++r) acc[r][0] = V::Fma(V::LoadBf16(v0 + r * ldv + i), fi, acc[r][0]);
  }
  if (i < n) {
    const F ft = LoadF32Tail<V>(f + i, n - i);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = V::Fma(LoadBf16Tail<V>(v0 + r * ldv + i, n - i), ft, acc[r][0]);
    }
  }
  for (int r = 0; r < R; ++r) {
    out[r] = V::ReduceAdd(V::Add(V::Add(acc[r][0], acc[r][1]), V::Add(acc[r][2], acc[r][3])));
  }
}

// DotBf16F32 of R rows v[r] (stride ldv) against one f, sharing f's loads:
// each result is bitwise DotBf16F32's (the same four accumulators, the same
// order).
template <class V, int R>
void DotRowsBf16F32(const bf16* v0, int64_t ldv, const float* f, int64_t n, float* out) {
  DotRowsBf16F32Part<V, R, true, true>(v0, ldv, f, n, 0, n, nullptr, out);
}

// ops_cpu.h dot4_bf16_f32_cols (R rows): DotRowsBf16F32Part for the range.
template <class V, int R>
void DotRowsBf16F32Cols(const bf16* v0, int64_t ldv, const float* f, int64_t n, int64_t c0,
                        int64_t c1, float* state, float* out) {
  if (c0 == 0 && c1 == n)
    return DotRowsBf16F32Part<V, R, true, true>(v0, ldv, f, n, c0, c1, state, out);
  if (c0 == 0) return DotRowsBf16F32Part<V, R, true, false>(v0, ldv, f, n, c0, c1, state, out);
  if (c1 == n) return DotRowsBf16F32Part<V, R, false, true>(v0, ldv, f, n, c0, c1, state, out);
  DotRowsBf16F32Part<V, R, false, false>(v0, ldv, f, n, c0, c1, state, out);
}

// kernels/moe.h SwiGlu on one row (ops_cpu.h swiglu_row).  The last
// n % kLanes values go through zero-padded copies (a zero gate's table
// entry is silu(0) = 0), so every lane runs the same operations.
template <class V>
void SwiGluRow(const bf16* gate, const bf16* up, int64_t n, float limit, float silu_limit,
               const float* weight, const float* silu, bf16* h) {
  using F = typename V::F;
  constexpr int64_t L = V::kLanes;
  const F hi = V::Set1(limit), lo = V::Set1(-limit), s_limit = V::Set1(silu_limit);
  const auto lanes = [&](const bf16* g, const bf16* u) {
    const F s = V::SelectAbove(V::LoadBf16(g), limit, s_limit, V::LookupBf16(silu, g));
    // std::clamp(u, -limit, limit) with its NaN: max/min return the second
    // operand when either is NaN.
    const F t = V::Mul(s, V::Min(hi, V::Max(lo, V::LoadBf16(u))));
    return weight != nullptr ? V::Mul(V::Set1(*weight), t) : t;
  };
  int64_t i = 0;
  for (; i + L <= n; i += L) V::StoreBf16(h + i, lanes(gate + i, up + i));
  if (i < n) {
    bf16 g[L] = {}, u[L] = {};
    for (int64_t j = 0; j < n - i; ++j) g[j] = gate[i + j], u[j] = up[i + j];
    StoreBf16Tail<V>(h + i, lanes(g, u), n - i);
  }
}

template <class V>
float InvRms(const bf16* v, int64_t n, float eps) {
  return 1.0f / sqrtf(SumSquaresBf16<V>(v, n) / static_cast<float>(n) + eps);
}

template <class V>
void RmsNormRows(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y) {
  constexpr int64_t L = V::kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* xr = x + r * dim;
    bf16* yr = y + r * dim;
    // Elementwise part as the reference: w * (x * inv), two FP32 products.
    const typename V::F inv = V::Set1(InvRms<V>(xr, dim, eps));
    int64_t i = 0;
    for (; i + L <= dim; i += L) {
      V::StoreBf16(yr + i, V::Mul(V::LoadBf16(w + i), V::Mul(V::LoadBf16(xr + i), inv)));
    }
    if (i < dim) {
      const typename V::F v =
          V::Mul(LoadBf16Tail<V>(w + i, dim - i), V::Mul(LoadBf16Tail<V>(xr + i, dim - i), inv));
      StoreBf16Tail<V>(yr + i, v, dim - i);
    }
  }
}

// Per-head query RMS with the reference's five BF16 roundings; only the FP32
// sum of the rounded squares is reordered (four lane-vector accumulators).
template <class V>
void QHeadRmsRows(bf16* q, int64_t rows, int64_t dim, float eps) {
  constexpr int64_t L = V::kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    bf16* qr = q + r * dim;
    auto sq = [qr](int64_t i) {
      const typename V::F v = V::LoadBf16(qr + i);
      return V::RoundBf16(V::Mul(v, v));
    };
    typename V::F acc0 = V::Zero(), acc1 = V::Zero(), acc2 = V::Zero(), acc3 = V::Zero();
    int64_t i = 0;
    for (; i + 4 * L <= dim; i += 4 * L) {
      acc0 = V::Add(acc0, sq(i));
      acc1 = V::Add(acc1, sq(i + L));
      acc2 = V::Add(acc2, sq(i + 2 * L));
      acc3 = V::Add(acc3, sq(i + 3 * L));
    }
    for (; i + L <= dim; i += L) acc0 = V::Add(acc0, sq(i));
    if (i < dim) {
      const typename V::F v = LoadBf16Tail<V>(qr + i, dim - i);
      acc0 = V::Add(acc0, V::RoundBf16(V::Mul(v, v)));
    }
    const float sum = V::ReduceAdd(V::Add(V::Add(acc0, acc1), V::Add(acc2, acc3)));
    float ms = RoundToBf16(sum / static_cast<float>(dim));
    ms = RoundToBf16(ms + eps);
    const typename V::F inv = V::Set1(RoundToBf16(1.0f / sqrtf(ms)));
    for (i = 0; i + L <= dim; i += L) V::StoreBf16(qr + i, V::Mul(V::LoadBf16(qr + i), inv));
    if (i < dim) StoreBf16Tail<V>(qr + i, V::Mul(LoadBf16Tail<V>(qr + i, dim - i), inv), dim - i);
  }
}

// hc_pre / hc_head output and hc_post: elementwise, the reference's exact
// operation order per element, so bitwise equal to it.
template <class V>
void HcWeightedSumRows(const bf16* x, int64_t tokens, int64_t hc, int64_t dim, const float* pre,
                       bf16* y) {
  constexpr int64_t L = V::kLanes;
  for (int64_t t = 0; t < tokens; ++t) {
    const bf16* xt = x + t * hc * dim;
    const float* p = pre + t * hc;
    for (int64_t d = 0; d < dim; d += L) {
      const int64_t n = MinI(L, dim - d);
      auto load = [&](int64_t j) {
        return n == L ? V::LoadBf16(xt + j * dim + d) : LoadBf16Tail<V>(xt + j * dim + d, n);
      };
      typename V::F acc = V::Mul(V::Set1(p[0]), load(0));
      for (int64_t j = 1; j < hc; ++j) acc = V::Add(acc, V::Mul(V::Set1(p[j]), load(j)));
      if (n == L) {
        V::StoreBf16(y + t * dim + d, acc);
      } else {
        StoreBf16Tail<V>(y + t * dim + d, acc, n);
      }
    }
  }
}

template <class V>
void HcPostColumns(const bf16* f, const bf16* res, int64_t hc, int64_t dim, int64_t d_begin,
                   int64_t d_end, const float* post, const float* comb, bf16* y) {
  constexpr int64_t L = V::kLanes;
  for (int64_t d = d_begin; d < d_end; d += L) {
    const int64_t n = MinI(L, d_end - d);
    auto load = [&](const bf16* p) { return n == L ? V::LoadBf16(p) : LoadBf16Tail<V>(p, n); };
    const typename V::F fv = load(f + d);
    for (int64_t k = 0; k < hc; ++k) {
      typename V::F mix = V::Mul(V::Set1(comb[k]), load(res + d));
      for (int64_t j = 1; j < hc; ++j) {
        mix = V::Add(mix, V::Mul(V::Set1(comb[j * hc + k]), load(res + j * dim + d)));
      }
      const typename V::F out = V::Add(V::Mul(V::Set1(post[k]), fv), mix);
      bf16* yk = y + k * dim + d;
      if (n == L) {
        V::StoreBf16(yk, out);
      } else {
        StoreBf16Tail<V>(yk, out, n);
      }
    }
  }
}

// ---- Sparse attention ---------------------------------------------------------

constexpr int64_t kBlock =
    64;  // entries per online-softmax block (docs/model.md "Attention paths")

// kv row chunk at d (full vector or zero-padded tail).
template <class V>
typename V::F LoadRowChunk(const bf16* row, int64_t d, int64_t dim) {
  return d + V::kLanes <= dim ? V::LoadBf16(row + d) : LoadBf16Tail<V>(row + d, dim - d);
}

// exp(x) for x <= 0 (Cephes-style: 2^n * e^r with a degree-6 polynomial,
// within 2 FP32 ulp of libm expf); x < -87 (including -inf) gives 0, where
// expf would return at most 1.6e-38 (far below any probability that matters
// next to the block maximum's exp(0) = 1).
template <class V>
typename V::F ExpNonPositive(typename V::F x) {
  using F = typename V::F;
  const F n = V::Floor(V::Fma(x, V::Set1(1.44269504088896341f), V::Set1(0.5f)));
  F r = V::Fma(n, V::Set1(-0.693359375f), x);
  r = V::Fma(n, V::Set1(2.12194440e-4f), r);
  F y = V::Set1(1.9875691500e-4f);
  y = V::Fma(y, r, V::Set1(1.3981999507e-3f));
  y = V::Fma(y, r, V::Set1(8.3334519073e-3f));
  y = V::Fma(y, r, V::Set1(4.1665795894e-2f));
  y = V::Fma(y, r, V::Set1(1.6666665459e-1f));
  y = V::Fma(y, r, V::Set1(5.0000001201e-1f));
  y = V::Fma(y, V::Mul(r, r), V::Add(r, V::Set1(1.0f)));
  return V::ZeroBelow(V::ScalePow2(y, n), x, -87.0f);
}

// One block of the online softmax for one head.  p [kBlock]: logits in
// (entries >= n are padding), BF16-rounded probabilities out.
template <class V>
void BlockSoftmax(float* p, int64_t n, float& m, float& alpha, float& z) {
  constexpr int64_t L = V::kLanes;
  for (int64_t j = n; j < kBlock; ++j) p[j] = -INFINITY;
  typename V::F mx = V::Load(p);
  for (int64_t j = L; j < kBlock; j += L) mx = V::Max(mx, V::Load(p + j));
  const float m_new = MaxF(m, V::ReduceMax(mx));  // max is exact in any order
  alpha = expf(m - m_new);
  const typename V::F shift = V::Set1(m_new);
  typename V::F sum = V::Zero();
  for (int64_t j = 0; j < kBlock; j += L) {
    const typename V::F e = ExpNonPositive<V>(V::Sub(V::Load(p + j), shift));
    sum = V::Add(sum, e);
    V::Store(p + j, V::RoundBf16(e));
  }
  z = z * alpha + V::ReduceAdd(sum);
  m = m_new;
}

// Working set of G heads of one token.  qf/acc: [G, dim_pad] (q upcast and
// zero-padded / running P.V accumulator), pb: [G, 64] (block logits, then
// BF16 probabilities).  Per head the operation sequence never depends on G.
template <int G>
struct HeadGroup {
  const bf16* const* rows;  // [list_len] this token's kv rows
  int64_t dim;
  int64_t dim_pad;
  float* qf;
  float* acc;
  float* pb;
  float m[G], z[G], alpha[G];
};

// Prefetches `bytes` of a kv row (null: padding, nothing): an attention
// list's rows are scattered over the cache (the indexer's picks), which the
// hardware prefetchers do not follow, so both attention kernels' logits
// passes fetch the rows a few entries ahead of the one they score.  Always
// inlined: as an ordinary inline function GCC 12 judged the call free of
// effects and dropped it (no prefetcht0 left in the object).
[[gnu::always_inline]] inline void PrefetchRow(const bf16* row, int64_t bytes) {
  if (row == nullptr) return;
  for (int64_t b = 0; b < bytes; b += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(row) + b);
}

// The FMA kernel's distance (BM_Attention/Decode, 640 rows from DRAM on 2
// threads: 7-11 % faster at 4 than without; docs/kernels.md).
constexpr int64_t kFmaRowsAhead = 4;

// Logits of one block: a pass over each kv row serves the G heads (MQA: one
// latent row is key and value for every head).  FMA lanes over dim, one
// reduction tree per (row, head), the scale applied to the FP32 dot.
template <class V, int G>
void BlockScores(HeadGroup<G>& hg, int64_t b0, int64_t n, float scale, int64_t list_len) {
  for (int64_t j = 0; j < n; ++j) {
    if (b0 + j + kFmaRowsAhead < list_len) {
      PrefetchRow(hg.rows[b0 + j + kFmaRowsAhead], hg.dim * static_cast<int64_t>(sizeof(bf16)));
    }
    const bf16* row = hg.rows[b0 + j];
    if (row == nullptr) {
      for (int g = 0; g < G; ++g) hg.pb[g * kBlock + j] = -INFINITY;
      continue;
    }
    typename V::F s[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) s[g] = V::Zero();
    for (int64_t d = 0; d < hg.dim; d += V::kLanes) {
      const typename V::F kv = LoadRowChunk<V>(row, d, hg.dim);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) s[g] = V::Fma(V::Load(hg.qf + g * hg.dim_pad + d), kv, s[g]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) hg.pb[g * kBlock + j] = V::ReduceAdd(s[g]) * scale;
  }
}

// acc = acc*alpha + sum_j bf16(p_j)*kv_j per 16-float dim chunk, the G
// accumulators staying in registers across the block's rows (in order).
template <class V, int G>
void BlockPv(HeadGroup<G>& hg, int64_t b0, int64_t n) {
  for (int64_t d = 0; d < hg.dim; d += V::kLanes) {
    typename V::F pv[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) pv[g] = V::Zero();
    for (int64_t j = 0; j < n; ++j) {
      const bf16* row = hg.rows[b0 + j];
      if (row == nullptr) continue;
      const typename V::F kv = LoadRowChunk<V>(row, d, hg.dim);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) pv[g] = V::Fma(V::Set1(hg.pb[g * kBlock + j]), kv, pv[g]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      float* ag = hg.acc + g * hg.dim_pad + d;
      V::Store(ag, V::Add(V::Mul(V::Load(ag), V::Set1(hg.alpha[g])), pv[g]));
    }
  }
}

template <class V, int G>
void AttendGroup(const AttnArgs& a, int64_t t, int64_t h0, float* qf, float* acc, float* pb) {
  const int64_t dim = a.dim;
  HeadGroup<G> hg;
  hg.rows = a.kv_rows + t * a.list_len;
  hg.dim = dim;
  hg.dim_pad = (dim + kAttnDimAlign - 1) / kAttnDimAlign * kAttnDimAlign;
  hg.qf = qf;
  hg.acc = acc;
  hg.pb = pb;
  for (int g = 0; g < G; ++g) {
    const bf16* qh = a.q + (t * a.heads + h0 + g) * dim;
    for (int64_t d = 0; d < hg.dim_pad; ++d) {
      qf[g * hg.dim_pad + d] = d < dim ? ToF32(qh[d]) : 0.0f;
      acc[g * hg.dim_pad + d] = 0.0f;
    }
    hg.m[g] = -INFINITY;
    hg.z[g] = 0.0f;
  }
  for (int64_t b0 = 0; b0 < a.list_len; b0 += kBlock) {
    const int64_t n = MinI(kBlock, a.list_len - b0);
    BlockScores<V, G>(hg, b0, n, a.scale, a.list_len);
    for (int g = 0; g < G; ++g) BlockSoftmax<V>(pb + g * kBlock, n, hg.m[g], hg.alpha[g], hg.z[g]);
    BlockPv<V, G>(hg, b0, n);
  }
  // The sink joins the denominator once, against the final running max.
  for (int g = 0; g < G; ++g) {
    const typename V::F zv = V::Set1(hg.z[g] + expf(a.sink[h0 + g] - hg.m[g]));
    bf16* out = a.o + (t * a.heads + h0 + g) * dim;
    for (int64_t d = 0; d < dim; d += V::kLanes) {
      const typename V::F v = V::Div(V::Load(acc + g * hg.dim_pad + d), zv);
      if (d + V::kLanes <= dim) {
        V::StoreBf16(out + d, v);
      } else {
        StoreBf16Tail<V>(out + d, v, dim - d);
      }
    }
  }
}

template <class V>
void AttendHeads(const AttnArgs& a, int64_t t, int64_t h_begin, int64_t h_end, float* scratch) {
  const int64_t dim_pad = (a.dim + kAttnDimAlign - 1) / kAttnDimAlign * kAttnDimAlign;
  float* qf = scratch;
  float* acc = qf + kAttnGroup * dim_pad;
  float* pb = acc + kAttnGroup * dim_pad;
  int64_t h = h_begin;
  for (; h + 8 <= h_end; h += 8) AttendGroup<V, 8>(a, t, h, qf, acc, pb);
  for (; h + 4 <= h_end; h += 4) AttendGroup<V, 4>(a, t, h, qf, acc, pb);
  for (; h < h_end; ++h) AttendGroup<V, 1>(a, t, h, qf, acc, pb);
}

// ---- Indexer scores -----------------------------------------------------------

// G heads against the tile's keys (lane = entry): sequential over dim with a
// separate multiply and add, exactly the reference's dot; then the three BF16
// roundings and the in-order head sum.
template <class V, int G>
typename V::F IndexerHeads(const IndexerTileArgs& a, int64_t h0, typename V::F sum) {
  constexpr int64_t L = V::kLanes;
  typename V::F dot[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) dot[g] = V::Zero();
  for (int64_t d = 0; d < a.dim; ++d) {
    const typename V::F k = V::Load(a.key_t + d * L);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      dot[g] = V::Add(dot[g], V::Mul(V::Set1(a.q[(h0 + g) * a.dim + d]), k));
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const typename V::F relu = V::Max(V::RoundBf16(dot[g]), V::Zero());
    const typename V::F w = V::Set1(ToF32(a.w[h0 + g]));
    sum = V::Add(sum, V::RoundBf16(V::Mul(relu, w)));
  }
  return sum;
}

template <class V>
void IndexerTile(const IndexerTileArgs& a) {
  constexpr int64_t L = V::kLanes;
  // Transpose the keys to [dim, L] so that lanes are entries; unused lanes 0
  // (with the ISA's gathers where it has a TransposeKeys: the scalar loop
  // cost as much as the tile's dot products).
  if constexpr (requires { V::TransposeKeys(a.keys, a.n, a.dim, a.key_t); }) {
    V::TransposeKeys(a.keys, a.n, a.dim, a.key_t);
  } else {
    for (int64_t e = 0; e < L; ++e) {
      const bf16* key = e < a.n ? a.keys[e] : nullptr;
      for (int64_t d = 0; d < a.dim; ++d) a.key_t[d * L + e] = key ? ToF32(key[d]) : 0.0f;
    }
  }
  typename V::F sum = V::Zero();
  int64_t h = 0;
  for (; h + 8 <= a.heads; h += 8) sum = IndexerHeads<V, 8>(a, h, sum);
  for (; h < a.heads; ++h) sum = IndexerHeads<V, 1>(a, h, sum);
  float out[L];
  V::Store(out, V::RoundBf16(sum));
  for (int64_t e = 0; e < a.n; ++e) a.score[e] = out[e];
}

// ---- The ISA's table ---------------------------------------------------------

template <class V>
constexpr OpsKernels OpsKernelTable() {
  OpsKernels k;
  k.rms_norm = &RmsNormRows<V>;
  k.inv_rms = &InvRms<V>;
  k.dot_bf16_f32 = &DotBf16F32<V>;
  k.dot2_bf16_f32 = &DotRowsBf16F32<V, 2>;
  // 4 rows hold 16 accumulators: only where there are 32 registers.
  if constexpr (V::kLanes == 16) {
    k.dot4_bf16_f32 = &DotRowsBf16F32<V, 4>;
    k.dot4_bf16_f32_cols = &DotRowsBf16F32Cols<V, 4>;
  }
  k.q_head_rms = &QHeadRmsRows<V>;
  k.swiglu_row = &SwiGluRow<V>;
  k.hc_weighted_sum = &HcWeightedSumRows<V>;
  k.hc_post = &HcPostColumns<V>;
  k.attend_heads = &AttendHeads<V>;
  k.indexer_tile = V::kLanes;
  k.indexer_scores_tile = &IndexerTile<V>;
  return k;
}

}  // namespace
}  // namespace dsv4::kernels::cpu
