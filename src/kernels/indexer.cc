#include "kernels/indexer.h"

#include "kernels/dispatch.h"
#include "kernels/ref/indexer_ref.h"

namespace dsv4::kernels {

void IndexerScores(const bf16* q, int64_t tokens, int64_t heads, int64_t dim, const bf16* w,
                   const bf16* const* key_rows, int64_t max_entries, const int64_t* n_entries,
                   float* score, ThreadPool* pool) {
  ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
    ref::IndexerScores(q + begin * heads * dim, end - begin, heads, dim, w + begin * heads,
                       key_rows, max_entries, n_entries + begin, score + begin * max_entries);
  });
}

void TopKDescending(const float* score, int64_t n, int64_t k, int32_t* out) {
  ref::TopKDescending(score, n, k, out);
}

}  // namespace dsv4::kernels
