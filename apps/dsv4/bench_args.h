// The flags of dsv4 bench (cmd_bench.cc), shared with its engine runs
// (bench_engine.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine_flags.h"
#include "residency.h"

namespace dsv4::cli {

struct BenchArgs {
  std::string model;
  // --prompt-len N[,N2,...]: decode (and the engine runs) continue from N;
  // each further length is one more timed prefill in a fresh cache.
  std::vector<int64_t> prompt_lens = {128};
  int64_t prompt_len = 128;  // prompt_lens.front()
  int64_t decode_steps = 32;
  int64_t batch = 1;
  int threads = 0;
  std::string cpu_list = "auto";
  int64_t triad_mib = 512;
  int32_t speculative = 0;            // > 0: engine runs without MTP and with K = 1..speculative
  int32_t ep = 1;                     // > 1: expert-parallel engine runs only (docs/scale-out.md)
  bool enable_prefix_caching = true;  // of the engine runs (--speculative)
  int64_t prefix_turns = 0;           // > 0: multi-turn TTFT with and without prefix caching
  bool warmup = true;                 // an untimed prefill before each timed one
  std::string prepacked = "auto";
  ProfileFlagArgs profile;
  ResidencyFlags residency;
};

}  // namespace dsv4::cli
