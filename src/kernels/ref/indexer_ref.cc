#include "kernels/ref/indexer_ref.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

namespace dsv4::kernels::ref {

void IndexerScores(const bf16* q, int64_t tokens, int64_t heads, int64_t dim, const bf16* w,
                   const bf16* const* key_rows, int64_t max_entries, const int64_t* n_entries,
                   float* score) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t n = std::min(n_entries[t], max_entries);
    for (int64_t e = 0; e < max_entries; ++e) {
      if (e >= n) {
        score[t * max_entries + e] = kNegInf;
        continue;
      }
      const bf16* key = key_rows[e];
      float sum = 0.0f;
      for (int64_t h = 0; h < heads; ++h) {
        const bf16* qh = q + (t * heads + h) * dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < dim; ++d) dot += Bf16ToF32(qh[d]) * Bf16ToF32(key[d]);
        // Three BF16 roundings of the reference's BF16 tensor code (docs/model.md "Lightning
        // indexer").
        const float relu = std::max(RoundBf16(dot), 0.0f);
        sum += RoundBf16(relu * Bf16ToF32(w[t * heads + h]));
      }
      score[t * max_entries + e] = RoundBf16(sum);
    }
  }
}

void TopKDescending(const float* score, int64_t n, int64_t k, int32_t* out) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  // Descending score, ties by ascending index; -inf sorts last naturally.
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [score](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  std::copy(idx.begin(), idx.begin() + k, out);
}

}  // namespace dsv4::kernels::ref
