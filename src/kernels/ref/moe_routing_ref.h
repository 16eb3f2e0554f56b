// Scalar oracles for kernels/moe_routing.h: the same contracts written the
// plainest way (k argmax passes, an O(e * n * k) bucket scan, sequential
// loops), with no shared code, for the differential tests.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void BiasedTopK(const float* scores, const float* bias, int64_t n, int64_t e, int64_t k,
                int32_t* ids);
void HashRoute(const int32_t* tid2eid, int64_t vocab, const int32_t* token_ids, int64_t n,
               int64_t k, int32_t* ids);
void RouteWeights(const float* scores, int64_t n, int64_t e, const int32_t* ids, int64_t k,
                  float scale, float* weights);
int64_t SortByExpert(const int32_t* ids, const float* weights, int64_t n, int64_t k, int64_t e,
                     int64_t* offsets, int64_t* tokens, float* sorted_weights);
void GatherRows(const uint8_t* codes, const float* scales, int64_t d, int64_t nb,
                const int64_t* tokens, int64_t m, uint8_t* out_codes, float* out_scales);
void ScatterAddRows(const bf16* rows, const int64_t* tokens, int64_t m, int64_t d, float* acc);
void CombineExperts(const float* acc, const bf16* shared, int64_t n, int64_t d, bf16* y);
void SortRowsAscending(const int32_t* ids, int64_t n, int64_t k, int32_t* out);

}  // namespace dsv4::kernels::ref
