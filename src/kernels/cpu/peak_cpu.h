// The register-only loops behind kernels/peak.h (internal to the kernels
// layer), one table per ISA translation unit.  As in gemm_cpu.h only plain
// data crosses this header: the AVX-512 unit must not define inline
// functions with external linkage.
#pragma once

#include <cstdint>

namespace dsv4::kernels::cpu {

struct PeakLoop {
  // Runs `iterations` of the loop; returns the sum of every accumulator lane.
  double (*run)(int64_t iterations) = nullptr;
  int64_t multiply_adds_per_iteration = 0;
  const char* instruction = "";
};

struct PeakLoops {
  PeakLoop fp32_fma;
  PeakLoop int8_dot;               // vpdpbusd where the table has it
  PeakLoop int8_dot_without_vnni;  // AVX-512 without VNNI: vpmaddubsw + vpmaddwd
  PeakLoop bf16_dot;               // run == nullptr: not in this ISA
};

extern const PeakLoops kPeakLoopsAvx2;
extern const PeakLoops kPeakLoopsAvx512;

}  // namespace dsv4::kernels::cpu
