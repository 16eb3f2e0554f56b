#include "kernels/quant.h"

#include <algorithm>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "kernels/cpu/quant_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/int8_gemm.h"
#include "kernels/ref/int8_gemm_ref.h"
#include "kernels/ref/quant_ref.h"

namespace dsv4::kernels {

uint8_t E4M3FromF32(float x) { return ref::E4M3FromF32(x); }
uint8_t E2M1FromF32(float x) { return ref::E2M1FromF32(x); }
float Fp8BlockScale(float amax) { return ref::Fp8BlockScale(amax); }
float Fp4BlockScale(float amax) { return ref::Fp4BlockScale(amax); }

namespace {

// The one place that picks a quantization instruction set (null: the scalar
// reference).
const cpu::QuantKernels* SimdQuant() {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return &cpu::kQuantKernelsAvx512;
    case Isa::kAvx2:
      return &cpu::kQuantKernelsAvx2;
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

}  // namespace

// Declared in int8_gemm.h with the other W8A8 entry points; defined here,
// beside the quantizers' ISA dispatch.
void ActQuantInt8PerToken(const bf16* x, int64_t m, int64_t k, int8_t* codes, float* scales,
                          ThreadPool* pool) {
  const cpu::QuantKernels* simd = SimdQuant();
  // Tasks of at least ~16K elements (a row is 4-8K on the model's shapes).
  ParallelFor(pool, m, std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1)),
              [&](int64_t begin, int64_t end) {
                const bf16* xb = x + begin * k;
                int8_t* cb = codes + begin * k;
                if (simd != nullptr) {
                  simd->act_quant_int8(xb, end - begin, k, cb, scales + begin);
                } else {
                  ref::ActQuantInt8PerToken(xb, end - begin, k, cb, scales + begin);
                }
              });
}

void ActQuantFp8(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                 float* scales) {
  DSV4_CHECK(block > 0 && cols % block == 0);
  const cpu::QuantKernels* simd = SimdQuant();
  if (simd != nullptr && block % 32 == 0)
    return simd->act_quant_fp8(x, rows, cols, block, codes, scales);
  ref::ActQuantFp8(x, rows, cols, block, codes, scales);
}

void KvQatFp8(bf16* x, int64_t rows, int64_t cols, int64_t nope) {
  DSV4_CHECK(nope >= 0 && nope <= cols && nope % 64 == 0);
  const cpu::QuantKernels* simd = SimdQuant();
  if (simd != nullptr) return simd->kv_qat_fp8(x, rows, cols, nope);
  ref::KvQatFp8(x, rows, cols, nope);
}

void Fp4Qat(bf16* x, int64_t rows, int64_t cols) {
  DSV4_CHECK(cols % 32 == 0);
  const cpu::QuantKernels* simd = SimdQuant();
  if (simd != nullptr) return simd->fp4_qat(x, rows, cols);
  ref::Fp4Qat(x, rows, cols);
}

}  // namespace dsv4::kernels
