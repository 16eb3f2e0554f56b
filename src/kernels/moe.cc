#include "kernels/moe.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops_cpu.h"
#include "kernels/ref/moe_ref.h"

namespace dsv4::kernels {

namespace {

// silu(g) = g / (1 + exp(-g)), the reference's expression, for every BF16
// bit pattern g (256 KiB, built once): a gate value is BF16, so looking it
// up gives the reference's bits without an exp() per element, which cost
// ~6 ns each (a decode step's 7 expert bodies x 2,048: ~85 µs per layer on
// one thread; docs/performance.md "SwiGLU from a table").
struct SiluTable {
  float v[1 << 16];
  SiluTable() {
    for (uint32_t bits = 0; bits < (1u << 16); ++bits) {
      const float g = Bf16ToF32(bf16{static_cast<uint16_t>(bits)});
      v[bits] = g / (1.0f + std::exp(-g));
    }
  }
};

const SiluTable& Silu() {
  static const SiluTable table;  // a constant: thread-safe first use
  return table;
}

}  // namespace

// Elementwise and tiny next to the expert GEMMs: the scalar code is the kernel.
void SqrtSoftplus(const float* x, int64_t n, float* s) { ref::SqrtSoftplus(x, n, s); }

// ref::SwiGlu's operations in its order, silu from the table: min(g, limit)
// is g (a table entry) unless g > limit, where it is limit itself, whose
// silu is computed here with the same expression.
void SwiGlu(const bf16* gate, const bf16* up, int64_t rows, int64_t dim, float limit,
            const float* row_weight, bf16* h) {
  const float* silu = Silu().v;
  const float silu_limit = limit / (1.0f + std::exp(-limit));
  const cpu::OpsKernels* simd = cpu::ActiveOpsKernels();
  if (simd != nullptr && simd->swiglu_row != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      simd->swiglu_row(gate + r * dim, up + r * dim, dim, limit, silu_limit,
                       row_weight != nullptr ? row_weight + r : nullptr, silu, h + r * dim);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      const bf16 gb = gate[r * dim + i];
      const float s = Bf16ToF32(gb) > limit ? silu_limit : silu[gb.bits];
      const float u = std::clamp(Bf16ToF32(up[r * dim + i]), -limit, limit);
      float t = s * u;
      if (row_weight != nullptr) t = row_weight[r] * t;
      h[r * dim + i] = F32ToBf16(t);
    }
  }
}

}  // namespace dsv4::kernels
