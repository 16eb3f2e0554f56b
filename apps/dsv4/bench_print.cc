#include "bench_print.h"

#include <cstdarg>
#include <cstdio>

namespace dsv4::cli {
namespace {

[[gnu::format(printf, 2, 3)]] void Append(std::string* out, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  *out += buf;
}

double Giga(double v) { return v / 1e9; }

}  // namespace

std::string FormatPeakRates(const std::vector<PeakRate>& rates) {
  std::string out;
  for (const PeakRate& r : rates) {
    const std::string name(kernels::PeakMixName(r.mix));
    if (r.instruction.empty()) {
      Append(&out, "peak compute, %s: no instruction on this ISA\n", name.c_str());
      continue;
    }
    Append(&out,
           "peak compute, %s (%s, register-only loop on %d threads): best %.2f GFLOP/s, median "
           "%.2f GFLOP/s\n",
           name.c_str(), r.instruction.c_str(), r.threads, r.best_gflops, r.median_gflops);
  }
  return out;
}

double MixWeightedShare(double tok_per_s, const PrefillFlops& flops,
                        const std::vector<PeakRate>& rates) {
  double ideal_sec = 0;  // per token, every mix at its own peak
  for (int m = 0; m < kernels::kNumPeakMixes; ++m) {
    const double f = flops.by_mix[static_cast<size_t>(m)];
    if (f == 0) continue;
    const PeakRate* peak = FindPeak(rates, static_cast<kernels::PeakMix>(m));
    if (peak == nullptr) return 0;
    ideal_sec += f / (peak->median_gflops * 1e9);
  }
  return ideal_sec * tok_per_s;
}

std::string FormatPrefillCompute(int64_t prompt_len, double tok_per_s, const PrefillFlops& flops,
                                 const std::vector<PeakRate>& rates) {
  const auto len = static_cast<long long>(prompt_len);
  const auto mix = [&](kernels::PeakMix m) { return Giga(flops.by_mix[static_cast<size_t>(m)]); };
  std::string out;
  Append(&out,
         "prefill FLOPs per token at %lld tokens: %.4g GFLOP (fp32 fma %.4g, int8 dot %.4g, bf16 "
         "dot %.4g; of which routed experts %.4g, attention core %.4g, indexer scores %.4g, head "
         "%.4g)\n",
         len, Giga(flops.total()), mix(kernels::PeakMix::kFp32Fma), mix(kernels::PeakMix::kInt8Dot),
         mix(kernels::PeakMix::kBf16Dot), Giga(flops.routed_experts), Giga(flops.attention),
         Giga(flops.indexer_scores), Giga(flops.head));
  const double achieved = tok_per_s * Giga(flops.total());
  Append(&out, "prefill compute at %lld tokens: %.1f tok/s x %.4g GFLOP = %.2f GFLOP/s", len,
         tok_per_s, Giga(flops.total()), achieved);
  for (const PeakRate& r : rates) {
    if (r.median_gflops <= 0) continue;
    Append(&out, ", %.1f%% of the %s peak", 100.0 * achieved / r.median_gflops,
           std::string(kernels::PeakMixName(r.mix)).c_str());
  }
  Append(&out, "; %.1f%% of the mix-weighted peak\n",
         100.0 * MixWeightedShare(tok_per_s, flops, rates));
  return out;
}

}  // namespace dsv4::cli
