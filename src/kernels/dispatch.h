// The one place that chooses an instruction set for the kernels.
//
// Every public kernel in this directory has a scalar reference in ref/ (the
// oracle for differential tests) and, where it pays, AVX2 and AVX-512 versions
// in cpu/.  The public functions dispatch on ActiveIsa(), detected once from
// cpuid and capped by DSV4_ISA=scalar|avx2|avx512 in the environment (read at
// first use; tests call SetIsaForTesting instead).
#pragma once

#include <string_view>

namespace dsv4::kernels {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

Isa ActiveIsa();
std::string_view IsaName(Isa isa);
// The best ISA this CPU supports (ignores DSV4_ISA).
Isa BestSupportedIsa();
// Forces an ISA (capped at BestSupportedIsa()).  Tests only; not thread-safe
// with concurrent kernel calls.
void SetIsaForTesting(Isa isa);

}  // namespace dsv4::kernels
