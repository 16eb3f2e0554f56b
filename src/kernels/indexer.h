// Lightning-indexer scoring and top-k (docs/model.md "Lightning indexer";
// tests/data/golden/ops/README.md §15).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/numeric.h"

namespace dsv4::kernels {

// score[t, e] = bf16(sum_h bf16(relu(bf16(q[t,h] . key_rows[e])) * w[t,h])), FP32 sums,
// for e < n_entries[t] (entries >= n_entries[t] get -inf).  q [tokens, heads, dim],
// w [tokens, heads] BF16 (already scaled), key_rows [max_entries] row pointers,
// score [tokens, max_entries] FP32 holding BF16 values.
void IndexerScores(const bf16* q, int64_t tokens, int64_t heads, int64_t dim, const bf16* w,
                   const bf16* const* key_rows, int64_t max_entries, const int64_t* n_entries,
                   float* score, ThreadPool* pool);

// The k largest of score[0..n) in descending order, ties broken by ascending
// index; -inf entries sort last.  out [k].  REQUIRES: k <= n.
void TopKDescending(const float* score, int64_t n, int64_t k, int32_t* out);

}  // namespace dsv4::kernels
