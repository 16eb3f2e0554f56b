#include "kernels/attention.h"

#include "kernels/dispatch.h"
#include "kernels/ref/attention_ref.h"

namespace dsv4::kernels {

void SparseAttention(const bf16* q, int64_t tokens, int64_t heads, int64_t dim,
                     const bf16* const* kv_rows, int64_t list_len, const float* sink,
                     float scale, bf16* o, ThreadPool* pool) {
  ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
    const int64_t off = begin * heads * dim;
    ref::SparseAttention(q + off, end - begin, heads, dim, kv_rows + begin * list_len, list_len,
                         sink, scale, o + off);
  });
}

}  // namespace dsv4::kernels
