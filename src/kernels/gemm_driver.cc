// The GEMM drivers' shared machinery (gemm_driver.h): the kernel table in
// use, the activations' scratch, the choice of FP8/FP4 panel kernels with
// their diagnostic and test switches, and per-call weight repacking.
#include "kernels/gemm_driver.h"

#include <cstdlib>
#include <cstring>

#include "base/cpu_features.h"
#include "kernels/dispatch.h"

namespace dsv4::kernels {

const cpu::GemmKernels* SimdKernels() {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return &cpu::kGemmKernelsAvx512;
    case Isa::kAvx2:
      return &cpu::kGemmKernelsAvx2;
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

namespace {
struct GemmActivationsTag {};
}  // namespace

float* Activations(int64_t n) {
  return ScratchArray<GemmActivationsTag, float>::Get(static_cast<size_t>(n));
}

namespace {

// True when the environment variable `name` is set to `value`.
bool EnvIs(const char* name, const char* value) {
  const char* env = std::getenv(name);
  return env != nullptr && std::strcmp(env, value) == 0;
}

// DSV4_FP8_KERNEL=fma keeps the FP8 GEMMs on the FMA kernel where the BF16
// dot one would run (a diagnostic switch like DSV4_ISA: same results within
// rounding, for side-by-side timing and bisecting).
std::atomic<bool>& Fp8WithoutBf16DotSlot() {
  static std::atomic<bool> on{EnvIs("DSV4_FP8_KERNEL", "fma")};
  return on;
}

std::atomic<bool>& Fp4WithoutVnniSlot() {
  static std::atomic<bool> on{false};
  return on;
}

std::atomic<bool>& Fp4WithoutVbmiSlot() {
  static std::atomic<bool> on{false};
  return on;
}

// DSV4_FP4_KERNEL=rows keeps every FP4 tile on the row kernels (no outer
// products): the same bits, for side-by-side timing like DSV4_FP8_KERNEL.
std::atomic<bool>& Fp4RowKernelsSlot() {
  static std::atomic<bool> on{EnvIs("DSV4_FP4_KERNEL", "rows")};
  return on;
}

// DSV4_FP4_KERNEL=exact (or rows) keeps the FP4 GEMMs on the exact integer
// kernels where the BF16 dot one would run: other bits within rounding, for
// side-by-side timing and bisecting.
std::atomic<bool>& Fp4WithoutBf16DotSlot() {
  static std::atomic<bool> on{EnvIs("DSV4_FP4_KERNEL", "exact") ||
                              EnvIs("DSV4_FP4_KERNEL", "rows")};
  return on;
}

}  // namespace

namespace cpu {
void UseFp4WithoutVnniForTesting(bool on) { Fp4WithoutVnniSlot().store(on); }
void UseFp4WithoutVbmiForTesting(bool on) { Fp4WithoutVbmiSlot().store(on); }
void UseFp4RowKernelsForTesting(bool on) { Fp4RowKernelsSlot().store(on); }
void UseFp8WithoutBf16DotForTesting(bool on) { Fp8WithoutBf16DotSlot().store(on); }
void UseFp4WithoutBf16DotForTesting(bool on) { Fp4WithoutBf16DotSlot().store(on); }
}  // namespace cpu

int64_t Fp4OuterMinRows() {
  return Fp4RowKernelsSlot().load(std::memory_order_relaxed) ? INT64_MAX : cpu::kFp4OuterMinRows;
}

Fp4KernelFn Fp4Kernel(const cpu::GemmKernels& simd) {
  static const CpuFeatures cpu = CpuFeatures::Detect();
  const bool without = !cpu.avx512vnni || Fp4WithoutVnniSlot().load(std::memory_order_relaxed);
  if (simd.fp4_without_vnni != nullptr && without) return simd.fp4_without_vnni;
  const bool vbmi = cpu.avx512vbmi && !Fp4WithoutVbmiSlot().load(std::memory_order_relaxed);
  return simd.fp4_vbmi != nullptr && vbmi ? simd.fp4_vbmi : simd.fp4;
}

bool Fp4DotAvailable(const cpu::GemmKernels& simd) {
  static const CpuFeatures cpu = CpuFeatures::Detect();
  return simd.fp4_bf16dot != nullptr && cpu.avx512bf16 && cpu.avx512vbmi &&
         !Fp4WithoutBf16DotSlot().load(std::memory_order_relaxed);
}

bool Fp4Dot(const cpu::GemmKernels& simd, const Fp4Weight& w) {
  return w.layout == Fp4Layout::kPanels && Fp4DotAvailable(simd) && Fp4PanelsFitBf16(w);
}

Fp8Choice Fp8Kernel(const cpu::GemmKernels& simd) {
  static const CpuFeatures cpu = CpuFeatures::Detect();
  const bool dot = simd.fp8_bf16dot != nullptr && cpu.avx512bf16 && cpu.avx512vbmi &&
                   !Fp8WithoutBf16DotSlot().load(std::memory_order_relaxed);
  return dot ? Fp8Choice{simd.fp8_bf16dot, true} : Fp8Choice{simd.fp8, false};
}

int64_t Fp8RepackBytes(const Fp8Weight& w, bool panels) {
  if (panels == (w.layout == Fp8Layout::kPanels)) return 0;
  return panels ? Fp8PanelBytes(w.out, w.in) : w.out * w.in;
}

Fp8Weight Fp8ForKernel(const Fp8Weight& w, bool panels, uint8_t* at) {
  if (panels == (w.layout == Fp8Layout::kPanels)) return w;
  return panels ? PackFp8Panels(w, at) : UnpackFp8Rows(w, at);
}

Fp8Weight Fp8ForKernel(const Fp8Weight& w, bool panels) {
  const int64_t bytes = Fp8RepackBytes(w, panels);
  if (bytes == 0) return w;
  return Fp8ForKernel(w, panels,
                      ScratchArray<Fp8RepackTag, uint8_t>::Get(static_cast<size_t>(bytes)));
}

int64_t Fp4RepackBytes(const Fp4Weight& w) {
  if (w.layout == Fp4Layout::kPanels) return 0;
  return Fp4PanelPackedBytes(w.out, w.in) + Fp4PanelScaleBytes(w.out, w.in);
}

Fp4Weight Fp4ForKernels(const Fp4Weight& w, uint8_t* at) {
  if (w.layout == Fp4Layout::kPanels) return w;
  return PackFp4Panels(w, at, at + Fp4PanelPackedBytes(w.out, w.in));
}

}  // namespace dsv4::kernels
