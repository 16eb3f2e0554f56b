#include "kernels/ref/hadamard_ref.h"

#include <cmath>

#include "kernels/scratch.h"

namespace dsv4::kernels::ref {

void HadamardBf16(bf16* x, int64_t rows, int64_t dim) {
  // fp32(dim^-0.5) computed in double, as the reference's Python constant.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
  // Also the production kernel on every ISA: the row buffer is the thread's
  // reusable scratch, not the heap.
  struct RowTag {};
  float* buf = ScratchArray<RowTag, float>::Get(static_cast<size_t>(dim));  // [dim]
  for (int64_t r = 0; r < rows; ++r) {
    bf16* row = x + r * dim;
    for (int64_t i = 0; i < dim; ++i) buf[i] = Bf16ToF32(row[i]);
    // Sylvester butterflies: (a, b) -> (a + b, a - b) over strides 1, 2, 4, ...
    for (int64_t h = 1; h < dim; h *= 2) {
      for (int64_t i = 0; i < dim; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const float a = buf[j];
          const float b = buf[j + h];
          buf[j] = a + b;
          buf[j + h] = a - b;
        }
      }
    }
    for (int64_t i = 0; i < dim; ++i) row[i] = F32ToBf16(buf[i] * scale);
  }
}

}  // namespace dsv4::kernels::ref
