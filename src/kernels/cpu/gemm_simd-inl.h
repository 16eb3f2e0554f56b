// The GEMM kernel families, written once (gemm_block_scaled-inl.h,
// gemm_fp4-inl.h, gemm_dense-inl.h, gemm_bf16dot-inl.h) and bound to one ISA's traits V by
// GemmKernelTable<V>() in that ISA's translation unit, which is compiled with
// the ISA's target flags.  gemm_driver.cc picks the table (the one dispatch point).
#pragma once

#include "kernels/cpu/gemm_bf16dot-inl.h"
#include "kernels/cpu/gemm_block_scaled-inl.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_dense-inl.h"
#include "kernels/cpu/gemm_fp4-inl.h"

namespace dsv4::kernels::cpu {
namespace {

template <class V>
constexpr GemmKernels GemmKernelTable() {
  GemmKernels k;
  k.panel = V::kLanes;
  k.fp8 = &Fp8GemmPanels<V>;
  k.fp4 = &Fp4GemmPanels<V>;
  k.dense = &DenseGemmPanels<V>;
  if constexpr (V::kBf16Dot) k.bf16_dot = &Bf16DotPanels<V>;
  return k;
}

}  // namespace
}  // namespace dsv4::kernels::cpu
