// dsv4 bench's runs through the whole engine (scheduler, runner, sampler),
// side by side in one process: decode without MTP and with MTP K = 1..N
// (--speculative, also under --ep), and multi-turn time to first token
// without and with prefix caching (--prefix-turns).  Each prints its lines
// and returns the command's exit code.
#pragma once

#include <cstdint>

#include "bench_args.h"

namespace dsv4::cli {

int RunSpeculativeComparison(const BenchArgs& args, int64_t vocab);
int RunPrefixComparison(const BenchArgs& args, int64_t vocab);

}  // namespace dsv4::cli
