#include "kernels/quant.h"

#include "base/logging.h"
#include "kernels/cpu/quant_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/quant_ref.h"

namespace dsv4::kernels {

uint8_t E4M3FromF32(float x) { return ref::E4M3FromF32(x); }
uint8_t E2M1FromF32(float x) { return ref::E2M1FromF32(x); }
float Fp8BlockScale(float amax) { return ref::Fp8BlockScale(amax); }
float Fp4BlockScale(float amax) { return ref::Fp4BlockScale(amax); }

void ActQuantFp8(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                 float* scales) {
  DSV4_CHECK(block > 0 && cols % block == 0);
  if (block % 32 == 0) {
    switch (ActiveIsa()) {
      case Isa::kAvx512:
        return cpu::ActQuantFp8Avx512(x, rows, cols, block, codes, scales);
      case Isa::kAvx2:
        return cpu::ActQuantFp8Avx2(x, rows, cols, block, codes, scales);
      case Isa::kScalar:
        break;
    }
  }
  ref::ActQuantFp8(x, rows, cols, block, codes, scales);
}

void KvQatFp8(bf16* x, int64_t rows, int64_t cols, int64_t nope) {
  DSV4_CHECK(nope >= 0 && nope <= cols && nope % 64 == 0);
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return cpu::KvQatFp8Avx512(x, rows, cols, nope);
    case Isa::kAvx2:
      return cpu::KvQatFp8Avx2(x, rows, cols, nope);
    case Isa::kScalar:
      break;
  }
  ref::KvQatFp8(x, rows, cols, nope);
}

void Fp4Qat(bf16* x, int64_t rows, int64_t cols) {
  DSV4_CHECK(cols % 32 == 0);
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return cpu::Fp4QatAvx512(x, rows, cols);
    case Isa::kAvx2:
      return cpu::Fp4QatAvx2(x, rows, cols);
    case Isa::kScalar:
      break;
  }
  ref::Fp4Qat(x, rows, cols);
}

}  // namespace dsv4::kernels
