#include "kernels/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/logging.h"

namespace dsv4::kernels {

namespace {

size_t Sz(int64_t v) { return static_cast<size_t>(v); }

// The routing order: a before b when its value is larger, ties to the lower
// index, NaN after every number (so the order is total and a NaN score cannot
// displace a real expert).
bool Before(float va, int64_t ia, float vb, int64_t ib) {
  if (std::isnan(va)) return std::isnan(vb) && ia < ib;
  if (std::isnan(vb)) return true;
  return va > vb || (va == vb && ia < ib);
}

// One pass over the experts keeping the row's current winners sorted in
// ids[0..count): O(e) compares plus O(k) per insertion, against the
// reference's k passes.  A winner's value is recomputed from its id (the same
// FP32 add, so the same bits) rather than kept in a second array.
void TopKRow(const float* s, const float* bias, int64_t e, int64_t k, int32_t* ids) {
  if (k <= 0) return;
  auto value = [&](int64_t i) { return s[i] + bias[i]; };
  int64_t count = 0;
  for (int64_t i = 0; i < e; ++i) {
    const float v = value(i);
    if (count == k && !Before(v, i, value(ids[k - 1]), ids[k - 1])) continue;
    int64_t p = count < k ? count++ : k - 1;  // the slot freed at the end
    while (p > 0 && Before(v, i, value(ids[p - 1]), ids[p - 1])) {
      ids[p] = ids[p - 1];
      --p;
    }
    ids[p] = static_cast<int32_t>(i);
  }
}

}  // namespace

void BiasedTopK(const float* scores, const float* bias, int64_t n, int64_t e, int64_t k,
                int32_t* ids, ThreadPool* pool) {
  DSV4_CHECK(k >= 0 && k <= e);
  ParallelFor(pool, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) TopKRow(scores + t * e, bias, e, k, ids + t * k);
  });
}

void HashRoute(const int32_t* tid2eid, int64_t vocab, const int32_t* token_ids, int64_t n,
               int64_t k, int32_t* ids) {
  for (int64_t t = 0; t < n; ++t) {
    const int64_t id = token_ids[t];
    DSV4_CHECK(id >= 0 && id < vocab);
    std::memcpy(ids + t * k, tid2eid + id * k, Sz(k) * sizeof(int32_t));
  }
}

void RouteWeights(const float* scores, int64_t n, int64_t e, const int32_t* ids, int64_t k,
                  float scale, float* weights, ThreadPool* pool) {
  ParallelFor(pool, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* s = scores + t * e;
      const int32_t* row = ids + t * k;
      float sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += s[row[j]];
      for (int64_t j = 0; j < k; ++j) weights[t * k + j] = (s[row[j]] / sum) * scale;
    }
  });
}

int64_t SortByExpert(const int32_t* ids, const float* weights, int64_t n, int64_t k, int64_t e,
                     int64_t* offsets, int64_t* tokens, float* sorted_weights) {
  // Counting sort with offsets[] doubling as the fill cursors: after the
  // placement pass offsets[i] has advanced to the end of expert i, which is
  // the start of expert i + 1, so shifting by one slot restores the starts.
  const int64_t na = n * k;
  std::memset(offsets, 0, Sz(e + 1) * sizeof(int64_t));
  for (int64_t a = 0; a < na; ++a) {
    DSV4_CHECK(ids[a] >= 0 && ids[a] < e);
    ++offsets[ids[a] + 1];
  }
  int64_t max_rows = 0;
  for (int64_t i = 0; i < e; ++i) {
    max_rows = std::max(max_rows, offsets[i + 1]);
    offsets[i + 1] += offsets[i];
  }
  for (int64_t a = 0; a < na; ++a) {
    const int64_t p = offsets[ids[a]]++;
    tokens[p] = a / k;
    sorted_weights[p] = weights[a];
  }
  std::memmove(offsets + 1, offsets, Sz(e) * sizeof(int64_t));
  offsets[0] = 0;
  return max_rows;
}

void GatherRows(const uint8_t* codes, const float* scales, int64_t d, int64_t nb,
                const int64_t* tokens, int64_t m, uint8_t* out_codes, float* out_scales) {
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(out_codes + r * d, codes + tokens[r] * d, Sz(d));
    std::memcpy(out_scales + r * nb, scales + tokens[r] * nb, Sz(nb) * sizeof(float));
  }
}

void ScatterAddRows(const bf16* rows, const int64_t* tokens, int64_t m, int64_t d, float* acc,
                    ThreadPool* pool) {
  ParallelFor(pool, m, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* a = acc + tokens[r] * d;
      const bf16* v = rows + r * d;
      for (int64_t c = 0; c < d; ++c) a[c] += Bf16ToF32(v[c]);
    }
  });
}

void CombineExperts(const float* acc, const bf16* shared, int64_t n, int64_t d, bf16* y,
                    ThreadPool* pool) {
  ParallelFor(pool, n, 8, [&](int64_t begin, int64_t end) {
    if (shared == nullptr) {
      for (int64_t i = begin * d; i < end * d; ++i) y[i] = F32ToBf16(acc[i]);
      return;
    }
    for (int64_t i = begin * d; i < end * d; ++i) y[i] = F32ToBf16(acc[i] + Bf16ToF32(shared[i]));
  });
}

void SortRowsAscending(const int32_t* ids, int64_t n, int64_t k, int32_t* out) {
  // Insertion sort: k is the handful of experts per token.
  for (int64_t t = 0; t < n; ++t) {
    int32_t* row = out + t * k;
    for (int64_t j = 0; j < k; ++j) {
      int64_t p = j;
      while (p > 0 && row[p - 1] > ids[t * k + j]) {
        row[p] = row[p - 1];
        --p;
      }
      row[p] = ids[t * k + j];
    }
  }
}

}  // namespace dsv4::kernels
