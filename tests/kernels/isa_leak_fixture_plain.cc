// Deliberately wrong (fixture of kernel_isa_leak_check_sees_stray_avx512):
// AVX-512 code in an object that is not one of the AVX-512 objects.
#include <immintrin.h>

__attribute__((target("avx512f"))) float StrayWide(const float* p) {
  return _mm512_reduce_add_ps(_mm512_loadu_ps(p));
}
