// Rotary embedding, interleaved pairs on the last rope_dim dims (docs/model.md
// "RoPE and YaRN"; tests/data/golden/ops/README.md §10).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/numeric.h"

namespace dsv4::kernels {

struct YarnParams {
  bool enabled = false;
  double factor = 16;
  double original_max_position = 65536;
  double beta_fast = 32;
  double beta_slow = 1;
};

// freqs[rope_dim/2], FP32 exactly as the reference builds them.
void RopeFrequencies(double base, int64_t rope_dim, const YarnParams& yarn, float* freqs);

// Rotates x [rows, heads, head_dim] in place: pair i of the last rope_dim dims
// of every head of row r by angle fp32(fp32(positions[r]) * freqs[i]) (or its
// negative if inverse).  One BF16 rounding per rotated element.  Rows are
// independent, so any split over `pool` (may be null) gives the same bits.
void ApplyRope(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rope_dim,
               const int64_t* positions, const float* freqs, bool inverse, ThreadPool* pool);

}  // namespace dsv4::kernels
