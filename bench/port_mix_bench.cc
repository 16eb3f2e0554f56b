// Which AVX-512 instructions compete with vdpbf16ps for the core's execution
// ports: register-only loops of 16 independent vdpbf16ps chains, alone and
// with 8 independent instructions of one kind beside them, and each kind
// alone.  When "dot16 + X" takes about as long as "dot16" alone, X runs on
// other ports; when it takes the sum of both, it shares theirs.  The FP4
// decode's choices rest on these figures (docs/performance.md "FP4 GEMV: the
// scale per 32-block, and which instructions share the dot products' ports").
// Figures: nanoseconds per loop iteration (ns_per_iter); compare them within
// one run.  Skipped where the CPU lacks AVX512-BF16 or AVX512-VBMI.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "base/cpu_features.h"

namespace dsv4 {
namespace {

#if defined(__x86_64__)

constexpr int64_t kIters = 1 << 20;

// The loop body's building blocks.  zmm0..15: the dot chains; zmm16..19:
// FMA chains; zmm20..23: sources; zmm24..31: the other instructions'
// results (each written afresh: no chain between iterations).
#define DSV4_DOT(a) "vdpbf16ps %%zmm21, %%zmm20, %%zmm" #a "\n\t"
#define DSV4_DOT8 \
  DSV4_DOT(0) DSV4_DOT(1) DSV4_DOT(2) DSV4_DOT(3) DSV4_DOT(4) DSV4_DOT(5) DSV4_DOT(6) DSV4_DOT(7)
#define DSV4_DOT16                                                                      \
  DSV4_DOT8 DSV4_DOT(8) DSV4_DOT(9) DSV4_DOT(10) DSV4_DOT(11) DSV4_DOT(12) DSV4_DOT(13) \
      DSV4_DOT(14) DSV4_DOT(15)
#define DSV4_EIGHT(op) op(24) op(25) op(26) op(27) op(28) op(29) op(30) op(31)
#define DSV4_SIX(op) op(24) op(25) op(26) op(27) op(28) op(29)
#define DSV4_PERMW(a) "vpermw %%zmm22, %%zmm23, %%zmm" #a "\n\t"
#define DSV4_SUBUSW(a) "vpsubusw %%zmm22, %%zmm23, %%zmm" #a "\n\t"
#define DSV4_SUBW(a) "vpsubw %%zmm22, %%zmm23, %%zmm" #a "\n\t"
#define DSV4_SRLW(a) "vpsrlw $4, %%zmm23, %%zmm" #a "\n\t"
#define DSV4_SHUFB(a) "vpshufb %%zmm22, %%zmm23, %%zmm" #a "\n\t"
#define DSV4_ADDPS(a) "vaddps %%zmm22, %%zmm23, %%zmm" #a "\n\t"
#define DSV4_TERNLOG(a) "vpternlogd $0xf8, %%zmm22, %%zmm23, %%zmm" #a "\n\t"
// Broadcast loads of a BF16 pair (32 bits) from the stack's red zone, which
// the loop only reads: alone, and folded into the dot product.
#define DSV4_BCAST(a) "vpbroadcastd -8(%%rsp), %%zmm" #a "\n\t"
#define DSV4_DOTM(a) "vdpbf16ps -8(%%rsp)%{1to16%}, %%zmm20, %%zmm" #a "\n\t"
#define DSV4_DOTM8 \
  DSV4_DOTM(0)     \
  DSV4_DOTM(1) DSV4_DOTM(2) DSV4_DOTM(3) DSV4_DOTM(4) DSV4_DOTM(5) DSV4_DOTM(6) DSV4_DOTM(7)
#define DSV4_DOTM16                                                                            \
  DSV4_DOTM8 DSV4_DOTM(8) DSV4_DOTM(9) DSV4_DOTM(10) DSV4_DOTM(11) DSV4_DOTM(12) DSV4_DOTM(13) \
      DSV4_DOTM(14) DSV4_DOTM(15)
#define DSV4_FMA4                             \
  "vfmadd231ps %%zmm21, %%zmm20, %%zmm16\n\t" \
  "vfmadd231ps %%zmm21, %%zmm20, %%zmm17\n\t" \
  "vfmadd231ps %%zmm21, %%zmm20, %%zmm18\n\t" \
  "vfmadd231ps %%zmm21, %%zmm20, %%zmm19\n\t"
#define DSV4_CLOBBERS                                                                             \
  "rcx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20",   \
      "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30",   \
      "xmm31"
// Each loop zeroes its sources (no denormal or NaN slows a lane) and has
// the AVX-512 target to itself (the file builds for the baseline ISA), so
// its asm may name zmm16..31.
#define DSV4_LOOP(name, body)                                                      \
  [[gnu::target("avx512f,avx512bw,avx512bf16,avx512vbmi")]] void name(int64_t n) { \
    asm volatile(                                                                  \
        "vpxord %%zmm20, %%zmm20, %%zmm20\n\tvpxord %%zmm21, %%zmm21, %%zmm21\n\t" \
        "vpxord %%zmm22, %%zmm22, %%zmm22\n\tvpxord %%zmm23, %%zmm23, %%zmm23\n\t" \
        "mov %0, %%rcx\n1:\n\t" body "dec %%rcx\n\tjnz 1b\n\t"                     \
        :                                                                          \
        : "r"(n)                                                                   \
        : DSV4_CLOBBERS);                                                          \
  }

DSV4_LOOP(Dot16, DSV4_DOT16)
DSV4_LOOP(Permw8, DSV4_EIGHT(DSV4_PERMW))
DSV4_LOOP(Subusw8, DSV4_EIGHT(DSV4_SUBUSW))
DSV4_LOOP(Subw8, DSV4_EIGHT(DSV4_SUBW))
DSV4_LOOP(Srlw8, DSV4_EIGHT(DSV4_SRLW))
DSV4_LOOP(Shufb8, DSV4_EIGHT(DSV4_SHUFB))
DSV4_LOOP(Addps8, DSV4_EIGHT(DSV4_ADDPS))
DSV4_LOOP(Ternlog8, DSV4_EIGHT(DSV4_TERNLOG))
DSV4_LOOP(Bcast8, DSV4_EIGHT(DSV4_BCAST))
DSV4_LOOP(Dot16Mem, DSV4_DOTM16)
DSV4_LOOP(Dot16Permw8, DSV4_DOT16 DSV4_EIGHT(DSV4_PERMW))
DSV4_LOOP(Dot16Subusw8, DSV4_DOT16 DSV4_EIGHT(DSV4_SUBUSW))
DSV4_LOOP(Dot16Subw8, DSV4_DOT16 DSV4_EIGHT(DSV4_SUBW))
DSV4_LOOP(Dot16Srlw8, DSV4_DOT16 DSV4_EIGHT(DSV4_SRLW))
DSV4_LOOP(Dot16Shufb8, DSV4_DOT16 DSV4_EIGHT(DSV4_SHUFB))
DSV4_LOOP(Dot16Addps8, DSV4_DOT16 DSV4_EIGHT(DSV4_ADDPS))
DSV4_LOOP(Dot16Ternlog8, DSV4_DOT16 DSV4_EIGHT(DSV4_TERNLOG))
DSV4_LOOP(Dot16Bcast8, DSV4_DOT16 DSV4_EIGHT(DSV4_BCAST))
// Two chunks of the FP4 BF16-dot GEMV (docs/kernels.md "FP4 with BF16 dot
// products"): per chunk 3 shifts, 4 vpermw, 4 saturating subtracts (the
// scale) and 4 dot products per row; at 1 and 2 rows, and without the
// subtracts, with one FMA per row and chunk in their place.
DSV4_LOOP(Fp4Rows1, DSV4_DOT8 DSV4_EIGHT(DSV4_PERMW) DSV4_EIGHT(DSV4_SUBUSW) DSV4_SIX(DSV4_SRLW))
DSV4_LOOP(Fp4Rows1NoSub, DSV4_DOT8 DSV4_EIGHT(DSV4_PERMW) DSV4_SIX(DSV4_SRLW))
DSV4_LOOP(Fp4Rows2, DSV4_DOT16 DSV4_EIGHT(DSV4_PERMW) DSV4_EIGHT(DSV4_SUBUSW) DSV4_SIX(DSV4_SRLW))
DSV4_LOOP(Fp4Rows2FmaForSub, DSV4_DOT16 DSV4_EIGHT(DSV4_PERMW) DSV4_SIX(DSV4_SRLW) DSV4_FMA4)

void BM_PortMix(benchmark::State& state, void (*loop)(int64_t)) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (!cpu.avx512bf16 || !cpu.avx512vbmi) {
    state.SkipWithError("needs AVX512-BF16 and AVX512-VBMI");
    return;
  }
  for (auto _ : state) loop(kIters);
  state.counters["ns_per_iter"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(kIters),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK_CAPTURE(BM_PortMix, dot16, &Dot16);
BENCHMARK_CAPTURE(BM_PortMix, permw8, &Permw8);
BENCHMARK_CAPTURE(BM_PortMix, subusw8, &Subusw8);
BENCHMARK_CAPTURE(BM_PortMix, subw8, &Subw8);
BENCHMARK_CAPTURE(BM_PortMix, srlw8, &Srlw8);
BENCHMARK_CAPTURE(BM_PortMix, shufb8, &Shufb8);
BENCHMARK_CAPTURE(BM_PortMix, addps8, &Addps8);
BENCHMARK_CAPTURE(BM_PortMix, ternlog8, &Ternlog8);
BENCHMARK_CAPTURE(BM_PortMix, bcast8, &Bcast8);
BENCHMARK_CAPTURE(BM_PortMix, dot16_mem, &Dot16Mem);
BENCHMARK_CAPTURE(BM_PortMix, dot16_permw8, &Dot16Permw8);
BENCHMARK_CAPTURE(BM_PortMix, dot16_subusw8, &Dot16Subusw8);
BENCHMARK_CAPTURE(BM_PortMix, dot16_subw8, &Dot16Subw8);
BENCHMARK_CAPTURE(BM_PortMix, dot16_srlw8, &Dot16Srlw8);
BENCHMARK_CAPTURE(BM_PortMix, dot16_shufb8, &Dot16Shufb8);
BENCHMARK_CAPTURE(BM_PortMix, dot16_addps8, &Dot16Addps8);
BENCHMARK_CAPTURE(BM_PortMix, dot16_ternlog8, &Dot16Ternlog8);
BENCHMARK_CAPTURE(BM_PortMix, dot16_bcast8, &Dot16Bcast8);
BENCHMARK_CAPTURE(BM_PortMix, fp4_rows1, &Fp4Rows1);
BENCHMARK_CAPTURE(BM_PortMix, fp4_rows1_no_sub, &Fp4Rows1NoSub);
BENCHMARK_CAPTURE(BM_PortMix, fp4_rows2, &Fp4Rows2);
BENCHMARK_CAPTURE(BM_PortMix, fp4_rows2_fma_for_sub, &Fp4Rows2FmaForSub);

#endif  // __x86_64__

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
