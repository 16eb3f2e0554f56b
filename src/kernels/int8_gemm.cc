// Dispatch and driver of the W8A8 kernels: output columns are split into
// fixed panels (and long batches into row blocks) over the thread pool.  The
// INT32 accumulation is exact, so neither the split nor the ISA changes a bit.
#include "kernels/int8_gemm.h"

#include <algorithm>

#include "base/cpu_features.h"
#include "base/logging.h"
#include "kernels/cpu/int8_gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/int8_gemm_ref.h"

namespace dsv4::kernels {

namespace {

constexpr int64_t kRowBlock = 64;
// Below this many rows the AVX2 kernel serves AVX-512 machines too: for the
// DRAM-bound GEMV it measured 1.5-2x faster than the VNNI kernel (whose
// offset form needs a second dot product per weight vector, amortized only
// over a 4-row tile); docs/performance.md.  Every kernel gives the same bits,
// so the choice cannot affect results.
constexpr int64_t kVnniMinRows = 4;
// Each task should stream at least this many weight bytes (wake-up cost).
constexpr int64_t kMinBytesPerTask = 64 * 1024;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The AVX-512 ISA level does not imply VNNI (Skylake-SP lacks it).
bool HasVnni() {
  static const bool vnni = CpuFeatures::Detect().avx512vnni;
  return vnni;
}

}  // namespace

// Scalar on every ISA: O(m*k) next to the GEMM's O(m*k*n), and a single
// implementation keeps the activation codes identical across ISAs.
void ActQuantInt8PerToken(const bf16* x, int64_t m, int64_t k, int8_t* codes, float* scales) {
  ref::ActQuantInt8PerToken(x, m, k, codes, scales);
}

void Int8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& w, bf16* y,
              ThreadPool* pool) {
  const Isa isa = ActiveIsa();
  if (isa == Isa::kScalar) return ref::Int8Gemm(x_codes, x_scales, m, w, y, pool);
  if (m <= 0 || w.out <= 0) return;
  // The VNNI kernel's offset form keeps row totals exact in INT32 up to here.
  DSV4_CHECK(w.in <= 65536);
  const bool vnni = isa == Isa::kAvx512 && HasVnni() && m >= kVnniMinRows;
  const cpu::Int8GemmArgs args{x_codes, x_scales, m, w, y};
  const int64_t num_panels = CeilDiv(w.out, cpu::kInt8Panel);
  const int64_t num_tasks = num_panels * CeilDiv(m, kRowBlock);
  const int64_t grain =
      std::max<int64_t>(1, CeilDiv(kMinBytesPerTask, std::max<int64_t>(1, cpu::kInt8Panel * w.in)));
  ParallelFor(pool, num_tasks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row_block = t / num_panels;
      const int64_t panel = t % num_panels;
      const int64_t r0 = row_block * kRowBlock;
      const int64_t r1 = std::min(m, r0 + kRowBlock);
      const int64_t c0 = panel * cpu::kInt8Panel;
      const int64_t c1 = std::min(w.out, c0 + cpu::kInt8Panel);
      if (vnni) {
        cpu::Int8GemmAvx512Vnni(args, r0, r1, c0, c1);
      } else {
        cpu::Int8GemmAvx2(args, r0, r1, c0, c1);
      }
    }
  });
}

}  // namespace dsv4::kernels
