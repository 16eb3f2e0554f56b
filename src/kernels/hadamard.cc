#include "kernels/hadamard.h"

#include "kernels/ref/hadamard_ref.h"

namespace dsv4::kernels {

namespace {

// Rows per task: 64 rows of 128 (one token's indexer queries) are ~25 us of
// scalar butterflies, worth a dispatch; fewer stay inline.
constexpr int64_t kMinRowsPerTask = 32;

}  // namespace

// O(dim log dim) scalar butterflies per row, rows over the pool: a prefill's
// indexer queries (64 rows per token) would otherwise run on one thread
// while the others wait.
void HadamardBf16(bf16* x, int64_t rows, int64_t dim, ThreadPool* pool) {
  ParallelFor(pool, rows, kMinRowsPerTask, [&](int64_t begin, int64_t end) {
    ref::HadamardBf16(x + begin * dim, end - begin, dim);
  });
}

}  // namespace dsv4::kernels
