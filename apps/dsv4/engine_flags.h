// The engine flags `dsv4 generate` shares with `dsv4 serve` (docs/server.md
// "Command line"): model, capacity, parallelism, memory and speculation.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "launch/engine_options.h"
#include "profile/options.h"
#include "profile/session.h"

namespace dsv4::cli {

struct EngineFlags {
  launch::EngineOptions options;
  std::string kv_cache_memory;                    // bytes, or a size such as 8G / 512MiB
  std::string speculative_config;                 // JSON, empty = unset
  std::optional<int32_t> num_speculative_tokens;  // deprecated alias
};

// Adds --model, --max-model-len, --max-num-seqs, --max-num-batched-tokens,
// --long-prefill-token-threshold, --block-size, --dp / --data-parallel-size,
// --kv-cache-memory, --memory-utilization, --threads, --prepacked,
// --enable-prefix-caching / --no-enable-prefix-caching, --speculative-config
// and --num-speculative-tokens to `cmd`.
void AddEngineFlags(CLI::App* cmd, EngineFlags* flags);

// Fills options.kv_cache_memory and options.num_speculative_tokens from the
// string flags.  InvalidArgument (one line) for a malformed size or JSON, or
// for --num-speculative-tokens combined with --speculative-config.
Status ResolveEngineFlags(EngineFlags* flags);

// --profile, --profile-output DIR and --profile-level LEVELS (docs/profiling.md
// "Flags"), shared by generate, bench and serve.
struct ProfileFlagArgs {
  bool profile = false;
  std::string output = profile::kDefaultOutput;
  std::string level = profile::kDefaultLevels;
  CLI::Option* output_option = nullptr;
  CLI::Option* level_option = nullptr;
};
void AddProfileFlags(CLI::App* cmd, ProfileFlagArgs* args);
// The reference's rules: --profile-output and --profile-level require
// --profile; the level list must parse.
Result<profile::ProfileFlags> ResolveProfileFlags(const ProfileFlagArgs& args);
// Starts a trace session writing to the next session's TracePath (nothing
// when flags.enabled is false).
Status StartProfile(const profile::ProfileFlags& flags);
// Stops the session Start began and prints one line on stderr naming the
// trace, its events, dropped events and size, prefixed by `command`.
Result<profile::SessionSummary> StopProfile(const char* command);

// "123" (bytes), "64K", "8G", "512MiB", "1.5GB": binary multiples (K = 1024).
Result<int64_t> ParseByteSize(const std::string& text);

}  // namespace dsv4::cli
