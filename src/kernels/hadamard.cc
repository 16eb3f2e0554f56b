#include "kernels/hadamard.h"

#include "kernels/ref/hadamard_ref.h"

namespace dsv4::kernels {

// O(dim log dim) butterflies per row: cheap next to the GEMMs around it, so
// the scalar version is the only one.
void HadamardBf16(bf16* x, int64_t rows, int64_t dim) { ref::HadamardBf16(x, rows, dim); }

}  // namespace dsv4::kernels
