// Peak arithmetic rates of the instruction mixes the prefill GEMMs run
// (dsv4 bench's peak-compute lines, docs/performance.md): short loops over
// registers only, no loads or stores, enough independent accumulators to
// cover each instruction's latency, so they measure what the execution
// units of one core can issue.  Pure functions: a call touches nothing but
// its registers and returns a value derived from them.
#pragma once

#include <cstdint>
#include <string_view>

namespace dsv4::kernels {

enum class PeakMix : int {
  // FP32 fused multiply-add (vfmadd231ps): the exact FP32 chains of the
  // BF16 and FP8 GEMMs, the FP32 router/compressor/head linears, attention.
  kFp32Fma = 0,
  // Unsigned x signed byte dot products, 4 products per INT32 lane: vpdpbusd
  // (AVX512-VNNI), else vpmaddubsw + vpmaddwd + vpaddd: the FP4 experts'
  // exact 32-block sums and the W8A8 GEMMs.
  kInt8Dot = 1,
  // BF16 pair dot products into FP32 (vdpbf16ps, AVX512-BF16): the FP8
  // GEMMs' BF16 dot kernel and the approximate MTP draft head.
  kBf16Dot = 2,
};
inline constexpr int kNumPeakMixes = 3;

std::string_view PeakMixName(PeakMix mix);
// The instructions the active ISA runs for mix, e.g. "vpdpbusd zmm"; empty
// when it has none for it (BF16 dot products below AVX512-BF16).
std::string_view PeakMixInstruction(PeakMix mix);
// Multiply-adds one RunPeakLoop(mix, iterations) call performs on the active
// ISA (a vpdpbusd counts 4 per INT32 lane, a vdpbf16ps 2 per FP32 lane);
// 0 when the ISA has no instruction for mix.
int64_t PeakLoopMultiplyAdds(PeakMix mix, int64_t iterations);
// Runs the loop of mix `iterations` times on the calling thread.  Every
// multiply-add adds 1 x 1 to an accumulator lane, so the returned sum of the
// lanes equals PeakLoopMultiplyAdds(mix, iterations) while every lane stays
// exact (FP32: below 2^24, i.e. a few hundred thousand iterations); for
// longer runs it is only a value that keeps the loop alive.  0 when the ISA
// has no instruction for mix.
double RunPeakLoop(PeakMix mix, int64_t iterations);

}  // namespace dsv4::kernels
