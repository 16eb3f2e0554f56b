#include "base/cpu_features.h"

namespace dsv4 {

CpuFeatures CpuFeatures::Detect() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = true;  // implied by x86-64-v3, the build baseline
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
  return f;
}

std::string CpuFeatures::ToString() const {
  std::string s;
  auto add = [&](bool b, const char* name) {
    if (!b) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(avx512vbmi, "avx512vbmi");
  return s.empty() ? "baseline" : s;
}

}  // namespace dsv4
