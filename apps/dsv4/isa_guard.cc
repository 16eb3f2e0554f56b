// Refuses, in one line, to run on a CPU without the build's baseline ISA.
//
// The whole build targets x86-64-v3 (AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE;
// cmake/layers.cmake), so on an older CPU the first vector instruction would
// kill the process with SIGILL and no explanation.  This file alone is
// compiled for baseline x86-64 (apps/dsv4/CMakeLists.txt) and runs as a
// high-priority constructor, before any C++ static initializer of the
// x86-64-v3 code.  It is plain C on purpose: an inline template instantiated
// here could be merged with a copy compiled for x86-64-v3.
#include <unistd.h>

namespace {

__attribute__((constructor(101))) void RefuseCpusBelowTheBuildBaseline() {
  __builtin_cpu_init();
#if defined(__clang__)  // Clang 14 knows no level names: the features that matter
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2")) {
    return;
  }
#else
  if (__builtin_cpu_supports("x86-64-v3")) return;
#endif
  static const char kMessage[] =
      "dsv4: error: this CPU lacks the x86-64-v3 instructions the build needs (AVX2, FMA, "
      "BMI2, F16C: Intel Haswell / AMD Zen or newer); run on such a CPU\n";
  const ssize_t ignored = write(2, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  _exit(1);
}

}  // namespace
