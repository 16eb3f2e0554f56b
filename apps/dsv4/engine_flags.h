// The engine flags `dsv4 generate` shares with `dsv4 serve` (docs/server.md
// "Command line"): model, capacity, parallelism, memory and speculation.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "launch/engine_options.h"

namespace dsv4::cli {

struct EngineFlags {
  EngineOptions options;
  std::string kv_cache_memory;                    // bytes, or a size such as 8G / 512MiB
  std::string speculative_config;                 // JSON, empty = unset
  std::optional<int32_t> num_speculative_tokens;  // deprecated alias
};

// Adds --model, --max-model-len, --max-num-seqs, --max-num-batched-tokens,
// --long-prefill-token-threshold, --block-size, --dp / --data-parallel-size,
// --kv-cache-memory, --memory-utilization, --threads, --prepacked,
// --speculative-config and --num-speculative-tokens to `cmd`.
void AddEngineFlags(CLI::App* cmd, EngineFlags* flags);

// Fills options.kv_cache_memory and options.num_speculative_tokens from the
// string flags.  InvalidArgument (one line) for a malformed size or JSON, or
// for --num-speculative-tokens combined with --speculative-config.
Status ResolveEngineFlags(EngineFlags* flags);

// "123" (bytes), "64K", "8G", "512MiB", "1.5GB": binary multiples (K = 1024).
Result<int64_t> ParseByteSize(const std::string& text);

}  // namespace dsv4::cli
