// Router scoring and the expert activation (docs/model.md "MoE"; tests/data/golden/ops/README.md
// §16-17).
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels {

// s = sqrt(softplus(x)) (softplus identity above 20, else log1p(exp(x))).
void SqrtSoftplus(const float* x, int64_t n, float* s);

// h[r, i] = bf16(w_r * silu(min(g, limit)) * clamp(u, -limit, limit)) with
// g, u the upcast BF16 gate/up values; row_weight null means w_r = 1 (shared
// expert: the multiply is skipped).  gate, up, h [rows, dim].
void SwiGlu(const bf16* gate, const bf16* up, int64_t rows, int64_t dim, float limit,
            const float* row_weight, bf16* h);

}  // namespace dsv4::kernels
