// What the running CPU supports.  Kernel ISA dispatch (kernels/dispatch.h) is
// the only consumer; everything else stays ISA-agnostic.
#pragma once

#include <string>

namespace dsv4 {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512vbmi = false;

  // The CPU this process runs on (cpuid).
  static CpuFeatures Detect();
  std::string ToString() const;
};

}  // namespace dsv4
