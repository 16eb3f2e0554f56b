#include "kernels/dispatch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/cpu_features.h"

namespace dsv4::kernels {

namespace {

Isa Detect() {
  const CpuFeatures f = CpuFeatures::Detect();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) return Isa::kAvx512;
  if (f.avx2 && f.fma) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa FromEnv(Isa best) {
  const char* env = std::getenv("DSV4_ISA");
  if (env == nullptr) return best;
  Isa want = best;
  if (std::strcmp(env, "scalar") == 0) want = Isa::kScalar;
  if (std::strcmp(env, "avx2") == 0) want = Isa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) want = Isa::kAvx512;
  return want < best ? want : best;
}

std::atomic<int>& ActiveSlot() {
  static std::atomic<int> slot{static_cast<int>(FromEnv(BestSupportedIsa()))};
  return slot;
}

}  // namespace

Isa BestSupportedIsa() {
  static const Isa best = Detect();
  return best;
}

Isa ActiveIsa() { return static_cast<Isa>(ActiveSlot().load(std::memory_order_relaxed)); }

void SetIsaForTesting(Isa isa) {
  const Isa best = BestSupportedIsa();
  ActiveSlot().store(static_cast<int>(isa < best ? isa : best));
}

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace dsv4::kernels
