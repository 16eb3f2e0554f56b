// Deliberately wrong (fixture of kernel_isa_leak_check_sees_weak_leak): an
// inline function with external linkage, compiled here with AVX-512 flags, is
// emitted as a weak symbol that the linker could hand to AVX2-only callers.
#include <immintrin.h>

[[gnu::noinline]] inline float LeakySum(const float* p) {
  return _mm512_reduce_add_ps(_mm512_loadu_ps(p));
}

float FixtureUsesLeakySum(const float* p) { return LeakySum(p); }
