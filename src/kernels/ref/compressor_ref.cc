#include "kernels/ref/compressor_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dsv4::kernels::ref {

// Whole-row passes over all d channels at once, as the reference writes the
// softmax over the block dimension: max, exponentials and their sum, then the
// weighted sum with p = e * (1 / sum).
void SoftmaxPool(const float* const* kv_rows, const float* const* score_rows, int64_t rows,
                 int64_t d, bf16* out) {
  const auto n = static_cast<size_t>(d);
  std::vector<float> mx(n, -std::numeric_limits<float>::infinity()), sum(n, 0.0f), acc(n, 0.0f);
  std::vector<float> e(static_cast<size_t>(rows) * n);
  for (int64_t j = 0; j < rows; ++j) {
    for (size_t c = 0; c < n; ++c) mx[c] = std::max(mx[c], score_rows[j][c]);
  }
  for (int64_t j = 0; j < rows; ++j) {
    for (size_t c = 0; c < n; ++c) {
      e[static_cast<size_t>(j) * n + c] = std::exp(score_rows[j][c] - mx[c]);
      sum[c] += e[static_cast<size_t>(j) * n + c];
    }
  }
  for (int64_t j = 0; j < rows; ++j) {
    for (size_t c = 0; c < n; ++c) {
      acc[c] += kv_rows[j][c] * (e[static_cast<size_t>(j) * n + c] * (1.0f / sum[c]));
    }
  }
  for (size_t c = 0; c < n; ++c) out[c] = F32ToBf16(acc[c]);
}

}  // namespace dsv4::kernels::ref
