// Where the weights and caches live and when they are resident
// (docs/deploy.md "Resident before ready", "NUMA placement"):
//   --numa none|interleave|node:N  the memory policy of the process, set
//       before the model loads (libnuma), so the caches and the page cache
//       the compute threads fault in follow it; a no-op with a log line on a
//       host with one NUMA node;
//   --populate  every page of the mapped checkpoint files is read once
//       (madvise WILLNEED, then one byte per page) before the engine counts
//       as ready, with a progress line and the time taken;
//   --mlock     mlockall(MCL_CURRENT) after the load: weights and caches
//       stay resident (never paged out), or a clear error naming
//       RLIMIT_MEMLOCK.
// serve, generate and bench take these flags; serve's /health answers 503
// until they are done.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "base/cpu_topology.h"
#include "base/status.h"

namespace dsv4::cli {

struct ResidencyFlags {
  bool mlock = false;
  bool populate = false;
  std::string numa = "none";
};
void AddResidencyFlags(CLI::App* cmd, ResidencyFlags* flags);

struct NumaPlan {
  enum class Mode { kNone, kInterleave, kNode };
  Mode mode = Mode::kNone;
  int node = -1;  // kNode
};
// "none", "interleave", "node:N" (also "node=N" or "node N").
Result<NumaPlan> ParseNuma(const std::string& text);
// Sets the process memory policy for a host with num_nodes nodes (libnuma's
// count when num_nodes < 0) and returns the log line.  InvalidArgument for a
// node the host does not have.  REQUIRES: called before the model loads and
// before the compute threads start (threads inherit the policy).
Result<std::string> ApplyNuma(const NumaPlan& plan, int num_nodes = -1);

// A file-backed mapping of the process (one line of /proc/self/maps).
struct MappedRegion {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  std::string path;
};
// The readable mappings of checkpoint files (*.safetensors) in the text of
// /proc/PID/maps.  Pure, for tests.
std::vector<MappedRegion> CheckpointRegions(const std::string& maps_text);

// --populate: reads one byte per page of every mapped checkpoint file, with
// a progress line on stderr; returns the summary ("populate: 1.2 GiB in 3 s
// (410 MiB/s)").
Result<std::string> PopulateCheckpointMappings();

// --mlock: mlockall(MCL_CURRENT); returns the log line with the bytes locked
// and the time taken, or FailedPrecondition from MlockError.
Result<std::string> LockAllMemory();
// The refusal when mlockall fails: errno's text, RLIMIT_MEMLOCK (-1 =
// unlimited) against the process's mapped bytes, and how to raise it.
std::string MlockError(int err, int64_t limit_bytes, int64_t mapped_bytes);

// --numa node:N with --cpu-list auto and --threads 0: one CPU per physical
// core of node N (not of the first node, --cpu-list auto's choice), as a
// CPU list ("8,9,10"); empty when node N has none of `places`.  Pure.
std::string NodeCpuList(const std::vector<CpuPlace>& places, int node);

// Parses and applies --numa before the model loads, logging the line.  With
// node:N on a multi-node host, --cpu-list auto and --threads 0, *cpu_list
// becomes NodeCpuList of the process's CPUs (the threads follow the memory).
Status PlaceMemory(const ResidencyFlags& flags, int threads, std::string* cpu_list);

// Applies --mlock and --populate after the model is loaded, logging a line
// for each.
Status MakeResident(const ResidencyFlags& flags);

}  // namespace dsv4::cli
