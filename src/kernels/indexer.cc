#include "kernels/indexer.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "kernels/cpu/ops_cpu.h"
#include "kernels/ref/indexer_ref.h"
#include "kernels/scratch.h"

namespace dsv4::kernels {

// Work items are (token, tile of entries): a decode token's thousands of
// entries spread over the pool.  The SIMD tiles reproduce the reference's
// operation sequence per entry, so scores are identical on every ISA (the
// top-k selection cannot flip between machines) and batch invariant.
namespace {
struct QueryTag {};
struct KeyTileTag {};
struct TopKTag {};

// Always inlined: GCC may treat a call that only prefetches as free of
// effects and drop it.
[[gnu::always_inline]] inline void PrefetchRow(const bf16* row, int64_t dim) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < dim * static_cast<int64_t>(sizeof(bf16)); b += 64) {
    __builtin_prefetch(p + b);
  }
}
}  // namespace

void IndexerScores(const bf16* q, int64_t tokens, int64_t heads, int64_t dim, const bf16* w,
                   const bf16* const* key_rows, int64_t max_entries, const int64_t* n_entries,
                   float* score, ThreadPool* pool) {
  const cpu::OpsKernels* simd = cpu::ActiveOpsKernels();
  if (simd == nullptr) {
    ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
      ref::IndexerScores(q + begin * heads * dim, end - begin, heads, dim, w + begin * heads,
                         key_rows, max_entries, n_entries + begin, score + begin * max_entries);
    });
    return;
  }
  const int64_t width = simd->indexer_tile;
  const int64_t num_tiles = (max_entries + width - 1) / width;
  ParallelFor(pool, tokens * num_tiles, 4, [&](int64_t begin, int64_t end) {
    // This thread's reusable arrays (kernels/scratch.h), not the heap.
    float* q_f32 =
        ScratchArray<QueryTag, float>::Get(static_cast<size_t>(heads * dim));  // [heads, dim]
    float* key_t =
        ScratchArray<KeyTileTag, float>::Get(static_cast<size_t>(dim * width));  // [dim, width]
    int64_t cur_t = -1;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = i / num_tiles;
      const int64_t e0 = (i % num_tiles) * width;
      const int64_t span = std::min(width, max_entries - e0);
      const int64_t valid = std::clamp(std::min(n_entries[t], max_entries) - e0, int64_t{0}, span);
      float* out = score + t * max_entries + e0;
      std::fill(out + valid, out + span, -std::numeric_limits<float>::infinity());
      if (valid == 0) continue;
      if (t != cur_t) {
        for (int64_t k = 0; k < heads * dim; ++k) q_f32[k] = Bf16ToF32(q[t * heads * dim + k]);
        cur_t = t;
      }
      // The next tile's keys, a tile ahead: the transposition's gathers are
      // not followed by the hardware prefetchers.
      const int64_t next = std::min(std::min(n_entries[t], max_entries), e0 + 2 * width);
      for (int64_t e = e0 + width; e < next; ++e) PrefetchRow(key_rows[e], dim);
      const cpu::IndexerTileArgs args{q_f32,         w + t * heads, heads, dim,
                                      key_rows + e0, valid,         key_t, out};
      simd->indexer_scores_tile(args);
    }
  });
}

void TopKDescending(const float* score, int64_t n, int64_t k, int32_t* out) {
  if (k <= 0) return;
  int32_t* idx = ScratchArray<TopKTag, int32_t>::Get(static_cast<size_t>(n));  // not the heap
  std::iota(idx, idx + n, 0);
  // A strict total order (score descending, index ascending), so selecting
  // with nth_element and then sorting the k winners is deterministic:
  // O(n + k log k) for the 512-of-many decode case.
  auto before = [score](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  };
  std::nth_element(idx, idx + (k - 1), idx + n, before);
  std::sort(idx, idx + k, before);
  std::copy(idx, idx + k, out);
}

}  // namespace dsv4::kernels
