// What the kernel-level spans of the forward report (docs/profiling.md
// "Kernel level"): bytes = weight bytes read (at the stored width) plus the
// activations or cache rows an op streams where they matter; flops = 2 per
// multiply-add of the op's matrix products.  Estimates from shapes, computed
// only while the kernel level records.
#pragma once

#include <cstdint>

#include "model/linear.h"

namespace dsv4::model::op_cost {

inline int64_t GemmFlops(int64_t m, int64_t out, int64_t in) { return 2 * m * out * in; }

// Bytes of a dense linear's weight: FP8 and INT8 store one byte per element
// (plus scales, under 1 %), BF16 two.
inline int64_t LinearBytes(const Linear& l, int64_t out, int64_t in) {
  return out * in * (l.is_bf16() ? 2 : 1);
}

}  // namespace dsv4::model::op_cost
