#include "kernels/ref/moe_routing_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/logging.h"

namespace dsv4::kernels::ref {

void BiasedTopK(const float* scores, const float* bias, int64_t n, int64_t e, int64_t k,
                int32_t* ids) {
  DSV4_CHECK(k >= 0 && k <= e);
  std::vector<char> taken(static_cast<size_t>(e));
  for (int64_t t = 0; t < n; ++t) {
    std::fill(taken.begin(), taken.end(), 0);
    // k passes, each taking the best expert not yet taken: larger sum first,
    // the lower id on ties, a NaN sum only when nothing else is left.
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      float best_v = 0;
      for (int64_t i = 0; i < e; ++i) {
        if (taken[static_cast<size_t>(i)]) continue;
        const float v = scores[t * e + i] + bias[i];
        const bool better = best < 0 || (std::isnan(best_v) && !std::isnan(v)) || v > best_v;
        if (better) {
          best = i;
          best_v = v;
        }
      }
      taken[static_cast<size_t>(best)] = 1;
      ids[t * k + j] = static_cast<int32_t>(best);
    }
  }
}

void HashRoute(const int32_t* tid2eid, int64_t vocab, const int32_t* token_ids, int64_t n,
               int64_t k, int32_t* ids) {
  for (int64_t t = 0; t < n; ++t) {
    DSV4_CHECK(token_ids[t] >= 0 && token_ids[t] < vocab);
    for (int64_t j = 0; j < k; ++j) ids[t * k + j] = tid2eid[token_ids[t] * k + j];
  }
}

void RouteWeights(const float* scores, int64_t n, int64_t e, const int32_t* ids, int64_t k,
                  float scale, float* weights) {
  for (int64_t t = 0; t < n; ++t) {
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += scores[t * e + ids[t * k + j]];
    for (int64_t j = 0; j < k; ++j) {
      weights[t * k + j] = (scores[t * e + ids[t * k + j]] / sum) * scale;
    }
  }
}

int64_t SortByExpert(const int32_t* ids, const float* weights, int64_t n, int64_t k, int64_t e,
                     int64_t* offsets, int64_t* tokens, float* sorted_weights) {
  int64_t p = 0;
  int64_t max_rows = 0;
  for (int64_t i = 0; i < e; ++i) {
    offsets[i] = p;
    for (int64_t a = 0; a < n * k; ++a) {
      DSV4_CHECK(ids[a] >= 0 && ids[a] < e);
      if (ids[a] != i) continue;
      tokens[p] = a / k;
      sorted_weights[p] = weights[a];
      ++p;
    }
    max_rows = std::max(max_rows, p - offsets[i]);
  }
  offsets[e] = p;
  return max_rows;
}

void GatherRows(const uint8_t* codes, const float* scales, int64_t d, int64_t nb,
                const int64_t* tokens, int64_t m, uint8_t* out_codes, float* out_scales) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < d; ++c) out_codes[r * d + c] = codes[tokens[r] * d + c];
    for (int64_t b = 0; b < nb; ++b) out_scales[r * nb + b] = scales[tokens[r] * nb + b];
  }
}

void ScatterAddRows(const bf16* rows, const int64_t* tokens, int64_t m, int64_t d, float* acc) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < d; ++c) acc[tokens[r] * d + c] += Bf16ToF32(rows[r * d + c]);
  }
}

void CombineExperts(const float* acc, const bf16* shared, int64_t n, int64_t d, bf16* y) {
  for (int64_t i = 0; i < n * d; ++i) {
    y[i] = F32ToBf16(shared != nullptr ? acc[i] + Bf16ToF32(shared[i]) : acc[i]);
  }
}

void SortRowsAscending(const int32_t* ids, int64_t n, int64_t k, int32_t* out) {
  for (int64_t t = 0; t < n; ++t) {
    std::copy(ids + t * k, ids + (t + 1) * k, out + t * k);
    std::sort(out + t * k, out + (t + 1) * k);
  }
}

}  // namespace dsv4::kernels::ref
