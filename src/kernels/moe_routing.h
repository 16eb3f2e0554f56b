// MoE routing and dispatch bookkeeping (docs/model.md "MoE"; docs/kernels.md
// "MoE routing and dispatch"): which experts each token goes to, with what
// weight, and the token <-> expert reordering around the expert GEMMs.  The
// router GEMM and the score function are elsewhere (gemm.h, moe.h).
//
// Every function is exact (selections, copies, one FP32 add or one rounding
// per output element in a fixed order), so the optimized versions are bitwise
// equal to the scalar references in ref/moe_routing_ref.h.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/numeric.h"

namespace dsv4::kernels {

// Score routing: ids[t, 0..k) = the k experts with the largest scores[t, i] + bias[i]
// (the sum rounded to FP32), in descending order of that sum; ties go to the lower
// expert id, NaN sums rank below every number (-inf included).
// scores [n, e], bias [e], ids [n, k].  REQUIRES: 0 <= k <= e.
void BiasedTopK(const float* scores, const float* bias, int64_t n, int64_t e, int64_t k,
                int32_t* ids, ThreadPool* pool);

// Hash routing: ids[t, j] = tid2eid[token_ids[t], j] (table order kept).
// tid2eid [vocab, k].  REQUIRES: every token id in [0, vocab) (checked: a broken
// invariant, the engine validates ids at admission).
void HashRoute(const int32_t* tid2eid, int64_t vocab, const int32_t* token_ids, int64_t n,
               int64_t k, int32_t* ids);

// Routing weights: weights[t, j] = (s[ids[t,j]] / sum) * scale with sum the
// sequential FP32 sum of s[ids[t, 0..k)] in that order (sqrt-softplus scores are
// renormalized, not softmaxed).  scores [n, e], ids/weights [n, k].
void RouteWeights(const float* scores, int64_t n, int64_t e, const int32_t* ids, int64_t k,
                  float scale, float* weights, ThreadPool* pool);

// Sorts the n*k assignments (row-major ids [n, k], weights [n, k]) by expert,
// stably (tokens ascending inside an expert): expert i's assignments are
// positions offsets[i] .. offsets[i+1] of tokens / sorted_weights.
// offsets [e + 1], tokens / sorted_weights [n*k].  Returns the largest number of
// assignments of one expert.  REQUIRES: every id in [0, e).
int64_t SortByExpert(const int32_t* ids, const float* weights, int64_t n, int64_t k, int64_t e,
                     int64_t* offsets, int64_t* tokens, float* sorted_weights);

// Gathers quantized activation rows: out_codes[r] = codes[tokens[r]] (d bytes)
// and out_scales[r] = scales[tokens[r]] (nb floats), r < m.
void GatherRows(const uint8_t* codes, const float* scales, int64_t d, int64_t nb,
                const int64_t* tokens, int64_t m, uint8_t* out_codes, float* out_scales);

// acc[tokens[r], c] += fp32(rows[r, c]) for r < m, c < d (one FP32 add per
// element).  REQUIRES: tokens[0..m) distinct (a token meets an expert once).
void ScatterAddRows(const bf16* rows, const int64_t* tokens, int64_t m, int64_t d, float* acc,
                    ThreadPool* pool);

// y = bf16(acc + fp32(shared)) elementwise, or bf16(acc) when shared is null
// (the shared expert is added last, after every routed expert).  [n, d] each.
void CombineExperts(const float* acc, const bf16* shared, int64_t n, int64_t d, bf16* y,
                    ThreadPool* pool);

// out[t] = ids[t, 0..k) sorted ascending (the golden `expert_ids` layout).
void SortRowsAscending(const int32_t* ids, int64_t n, int64_t k, int32_t* out);

}  // namespace dsv4::kernels
