#include "engine_flags.h"

#include <cctype>
#include <cmath>
#include <iostream>

#include "base/thread_pool.h"
#include "default_model.h"
#include "generate_config.h"

namespace dsv4::cli {

void AddEngineFlags(CLI::App* cmd, EngineFlags* flags) {
  launch::EngineOptions& o = flags->options;
  cmd->add_option("--model", o.model_dir, kModelFlagHelp);
  cmd->add_option("--max-model-len", o.max_model_len, "Prompt + output tokens per request")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", o.max_num_seqs, "Running requests at most")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "Token budget per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--long-prefill-token-threshold", o.long_prefill_token_threshold,
                  "Prefill chunk size for long prompts")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--block-size", o.block_size, "Source tokens per cache page")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--dp,--data-parallel-size", o.dp, "Attention data-parallel partitions")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--ep,--expert-parallel-size", o.ep,
                  "Expert-parallel ranks: run under mpirun -np N with --ep N (docs/scale-out.md)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--dist-timeout", o.dist_timeout_s,
                  "Seconds a rank waits for the others inside a step before stopping every rank")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--kv-cache-memory", flags->kv_cache_memory,
                  "Bytes for the caches, e.g. 8G (default: --memory-utilization of free RAM)");
  cmd->add_option("--memory-utilization", o.memory_utilization,
                  "Fraction of available RAM for caches when --kv-cache-memory is unset")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "Compute threads (0 = one per physical core of one NUMA node)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  // A server's operator reads the log; an offline run has its own summary.
  o.log_stats_interval_s = cmd->get_name() == "serve" ? 10 : 0;
  cmd->add_option("--log-stats-interval", o.log_stats_interval_s,
                  "Seconds between the engine's statistics lines in the log (throughput, queue, "
                  "cache, MTP acceptance); 0 = none")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  o.cpu_list = "auto";
  cmd->add_option("--cpu-list", o.cpu_list,
                  "CPUs to pin the compute threads to, one per thread (e.g. 0-7,16): auto (the "
                  "default cores when --threads is 0) or none")
      ->capture_default_str();
  cmd->add_option("--prepacked", o.prepacked,
                  "Prepacked sidecar: auto (<model>/dsv4-stacked-r1.safetensors when hot and "
                  "current), off, or a path (docs/prepack.md)")
      ->capture_default_str();
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching,
                "Reuse the cache pages and rolling-state snapshots of earlier prompts that share "
                "a prefix (on by default; docs/engine.md §7.2)");
  cmd->add_option("--speculative-config", flags->speculative_config,
                  R"(MTP speculation, e.g. {"method":"mtp","num_speculative_tokens":2})");
  cmd->add_option("--num-speculative-tokens", flags->num_speculative_tokens,
                  "Deprecated alias of --speculative-config (K drafts per step)")
      ->check(CLI::Range(0, 64));
}

void AddProfileFlags(CLI::App* cmd, ProfileFlagArgs* args) {
  cmd->add_flag("--profile", args->profile,
                "Record a Chrome trace-event profile (docs/profiling.md; serve: between "
                "POST /start_profile and /stop_profile)");
  args->output_option =
      cmd->add_option("--profile-output", args->output,
                      "Profile directory (trace.json, trace-N.json) or a .json file; needs "
                      "--profile")
          ->capture_default_str();
  args->level_option = cmd->add_option("--profile-level", args->level,
                                       "Profile levels: e2e, kernel (comma list) or verbose; "
                                       "needs --profile")
                           ->capture_default_str();
}

Result<profile::ProfileFlags> ResolveProfileFlags(const ProfileFlagArgs& args) {
  const bool output_given = args.output_option != nullptr && args.output_option->count() > 0;
  const bool level_given = args.level_option != nullptr && args.level_option->count() > 0;
  return profile::ResolveProfileFlags(args.profile, args.output, output_given, args.level,
                                      level_given);
}

Status StartProfile(const profile::ProfileFlags& flags) {
  if (!flags.enabled) return Status::Ok();
  profile::SessionOptions o;
  o.levels = flags.levels;
  o.path = profile::TracePath(flags.output, profile::SessionsStarted() + 1);
  return profile::StartSession(o);
}

Result<profile::SessionSummary> StopProfile(const char* command) {
  Result<profile::SessionSummary> s = profile::StopSession();
  if (!s.ok()) {
    std::cerr << command << ": profile: " << s.status().message() << "\n";
    return s;
  }
  std::cerr << fmt::format(
      "{}: profile ({}) written to {}: {} events, {} dropped, {:.1f} MiB, {:.2f} s\n", command,
      profile::LevelsName(s->levels), s->path, s->events, s->dropped_events,
      static_cast<double>(s->bytes) / (1 << 20), s->seconds);
  return s;
}

Status ResolveEngineFlags(EngineFlags* flags) {
  launch::EngineOptions& o = flags->options;
  o.kv_cache_memory = 0;
  if (!flags->kv_cache_memory.empty()) {
    auto bytes = ParseByteSize(flags->kv_cache_memory);
    if (!bytes.ok()) return bytes.status().WithPrefix("--kv-cache-memory");
    o.kv_cache_memory = *bytes;
  }
  if (o.memory_utilization <= 0) {
    return InvalidArgument("--memory-utilization must be in (0, 1], got {}", o.memory_utilization);
  }
  o.num_speculative_tokens = 0;
  if (!flags->speculative_config.empty()) {
    if (flags->num_speculative_tokens) {
      return InvalidArgument(
          "--num-speculative-tokens cannot be combined with --speculative-config");
    }
    auto k = ParseSpeculativeConfig(flags->speculative_config);
    if (!k.ok()) return k.status().WithPrefix("--speculative-config");
    o.num_speculative_tokens = *k;
  } else if (flags->num_speculative_tokens) {
    std::cerr << "dsv4: --num-speculative-tokens is deprecated; use --speculative-config "
                 "'{\"method\":\"mtp\",\"num_speculative_tokens\":K}'\n";
    o.num_speculative_tokens = *flags->num_speculative_tokens;
  }
  return Status::Ok();
}

Result<int64_t> ParseByteSize(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return InvalidArgument("expected a size such as 8G or 8589934592, got \"{}\"", text);
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (!unit.empty()) {
    static constexpr const char* kUnits = "KMGT";
    const size_t power = std::string_view(kUnits).find(unit[0]);
    const std::string rest = unit.substr(1);
    if (power == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB")) {
      return InvalidArgument("unknown size unit \"{}\" in \"{}\" (use K, M, G or T)",
                             text.substr(used), text);
    }
    scale = std::pow(1024.0, static_cast<double>(power + 1));
  } else if (text.find_first_of(".eE") != std::string::npos) {
    return InvalidArgument("a byte count must be an integer, got \"{}\"", text);
  }
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 9.0e18) {
    return InvalidArgument("size out of range: \"{}\"", text);
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace dsv4::cli
