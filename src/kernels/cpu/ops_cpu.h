// SIMD pieces behind norm.h, mhc.h, attention.h and indexer.h (internal to the
// kernels layer).  The public functions split work over the thread pool and
// own all scratch memory; the functions below compute fixed units of work
// (one row, one dot product, one (token, head range), one (token, entry
// tile)) with a fixed sequence of FP32 operations, so every output element is
// bitwise independent of how many tokens share a call and of the thread count.
//
// Each ISA's translation unit instantiates ops_simd-inl.h with its vector
// traits and exports one OpsKernels table; ActiveOpsKernels() is the one place
// that picks it.  AVX-512 translation units are compiled with AVX-512 flags:
// only plain structs, constants and the table cross this header (no inline
// functions or templates with external linkage, which the linker could pick
// for AVX2-only callers).
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::cpu {

// ---- Sparse attention -------------------------------------------------------

// Heads processed together so that one pass over a kv row serves them all.
inline constexpr int64_t kAttnGroup = 8;
// dim is padded to a multiple of this in scratch (a 64-byte chunk of BF16
// values, what the BF16 dot kernel reads at once).
inline constexpr int64_t kAttnDimAlign = 32;

struct AttnArgs {
  const bf16* q = nullptr;  // [tokens, heads, dim]
  int64_t heads = 0;
  int64_t dim = 0;
  const bf16* const* kv_rows = nullptr;  // [tokens, list_len], nullptr = padding
  int64_t list_len = 0;
  const float* sink = nullptr;  // [heads]
  float scale = 0;
  bf16* o = nullptr;  // [tokens, heads, dim]
};

struct IndexerTileArgs {
  const float* q = nullptr;  // [heads, dim] one token's queries, upcast to FP32
  const bf16* w = nullptr;   // [heads] that token's head weights
  int64_t heads = 0;
  int64_t dim = 0;
  const bf16* const* keys = nullptr;  // [n] the tile's key rows
  int64_t n = 0;                      // 1..tile width
  float* key_t = nullptr;             // scratch [dim, tile width]
  float* score = nullptr;             // [n] output (BF16 values)
};

// One ISA's kernels.
struct OpsKernels {
  // RMSNorm of rows [0, rows) (kernels/norm.h contract).  The sum of squares is
  // accumulated in four lane vectors (FMA) and reduced by a fixed tree.
  void (*rms_norm)(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps,
                   bf16* y) = nullptr;
  // 1 / sqrt(mean(v^2) + eps) over n upcast BF16 values (the hc_pre / hc_head rms).
  float (*inv_rms)(const bf16* v, int64_t n, float eps) = nullptr;
  // sum_i v[i] * f[i] over n values, FP32 (the hc mixes projection).
  float (*dot_bf16_f32)(const bf16* v, const float* f, int64_t n) = nullptr;
  // dot_bf16_f32 of the 2 rows v and v + ldv (out[0], out[1]), f read once:
  // bitwise the same two results.
  void (*dot2_bf16_f32)(const bf16* v, int64_t ldv, const float* f, int64_t n,
                        float* out) = nullptr;
  // dot_bf16_f32 of the 4 rows v + r·ldv (out[0..3]), f read once: bitwise
  // the same four results.  Null where the ISA has too few registers.
  void (*dot4_bf16_f32)(const bf16* v, int64_t ldv, const float* f, int64_t n,
                        float* out) = nullptr;
  // dot4_bf16_f32 over the columns [c0, c1), its lane accumulators carried
  // in state (4 rows x 4 vectors of kLanes floats) from the call over the
  // columns before (c0 == 0: from zero); the call with c1 == n writes out.
  // c0 and c1 < n are multiples of 4·kLanes.  Bitwise dot4_bf16_f32's
  // results.  Null where dot4_bf16_f32 is.
  void (*dot4_bf16_f32_cols)(const bf16* v, int64_t ldv, const float* f, int64_t n, int64_t c0,
                             int64_t c1, float* state, float* out) = nullptr;
  // Per-head query RMS (kernels/norm.h QHeadRms): the five BF16 roundings, the
  // sum of the rounded squares in four lane-vector accumulators.
  void (*q_head_rms)(bf16* q, int64_t rows, int64_t dim, float eps) = nullptr;
  // One row of kernels/moe.h SwiGlu: silu(g) from `silu` (a table over the
  // BF16 bit patterns) unless g > limit (then silu_limit), the up value
  // clamped to ±limit, times *weight when weight is set; the scalar
  // kernel's operations lane by lane, bitwise equal to it.
  void (*swiglu_row)(const bf16* gate, const bf16* up, int64_t n, float limit, float silu_limit,
                     const float* weight, const float* silu, bf16* h) = nullptr;
  // kernels/mhc.h HcWeightedSum / HcPost; elementwise in the reference's
  // order, bitwise equal to ref::.
  void (*hc_weighted_sum)(const bf16* x, int64_t tokens, int64_t hc, int64_t dim, const float* pre,
                          bf16* y) = nullptr;
  // hc_post of one token on columns [d_begin, d_end) (d_begin a multiple of
  // the lane count): f [dim], res and y [hc, dim], post [hc], comb [hc, hc];
  // kernels/mhc.cc splits tokens and column chunks over the pool.
  void (*hc_post)(const bf16* f, const bf16* res, int64_t hc, int64_t dim, int64_t d_begin,
                  int64_t d_end, const float* post, const float* comb, bf16* y) = nullptr;
  // Heads [h_begin, h_end) of token t.  scratch: 2 * kAttnGroup * dim_pad +
  // 2 * kAttnGroup * 64 floats (q and acc [kAttnGroup, dim_pad], logits and
  // probabilities [kAttnGroup, 64] each) with dim_pad = dim rounded up to
  // kAttnDimAlign.
  void (*attend_heads)(const AttnArgs& a, int64_t t, int64_t h_begin, int64_t h_end,
                       float* scratch) = nullptr;
  // The same with BF16 pair dot products (AVX512-BF16 CPUs only; null in
  // tables without it): FP32 accumulation in another fixed order, so other
  // bits than attend_heads within the same error bound.
  void (*attend_heads_bf16dot)(const AttnArgs& a, int64_t t, int64_t h_begin, int64_t h_end,
                               float* scratch) = nullptr;
  // Scores of one tile of indexer_tile entries (one per lane).  Every lane runs
  // exactly the scalar reference's operation sequence (sequential FP32 dot over
  // dim, separate multiply and add; sequential sum over heads), so the result
  // equals ref::IndexerScores bitwise.
  int64_t indexer_tile = 0;
  void (*indexer_scores_tile)(const IndexerTileArgs& a) = nullptr;
};

extern const OpsKernels kOpsKernelsAvx2;
extern const OpsKernels kOpsKernelsAvx512;

// The active ISA's table, or null for the scalar references: the one place
// the non-GEMM kernels choose an instruction set.
const OpsKernels* ActiveOpsKernels();

// The attention kernel of the active table: attend_heads_bf16dot where the
// CPU has AVX512-BF16, else attend_heads.
using AttendHeadsFn = void (*)(const AttnArgs& a, int64_t t, int64_t h_begin, int64_t h_end,
                               float* scratch);
AttendHeadsFn ActiveAttendHeads(const OpsKernels& k);
// Tests and benchmarks: the FMA kernel even where the BF16 dot one would run.
void UseAttentionWithoutBf16DotForTesting(bool on);

}  // namespace dsv4::kernels::cpu
