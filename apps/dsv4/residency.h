// Where the weights and caches live and when they are resident
// (docs/deploy.md "Resident before ready", "NUMA placement"):
//   --numa none|interleave|auto|node:N  the memory policy of the process
//       (launch/numa_placement.h), set before the model loads (libnuma), so
//       the caches and the page cache the compute threads fault in follow
//       it; a no-op with a log line on a host with one NUMA node; with
//       --ep N every rank applies it itself (auto: node local_rank % nodes);
//   --populate  every page of the mapped checkpoint files the model still
//       reads is read once (madvise WILLNEED, then one byte per page) before
//       the engine counts as ready, with a progress line and the time taken;
//   --mlock     mlockall after the load: weights and caches stay resident
//       (never paged out), or a clear error naming RLIMIT_MEMLOCK;
//       both leave out the tensors the model copied into its own layouts
//       (launch/residency.h); the engine applies them once it runs
//       (EngineOptions::populate, ::mlock, set by PlaceMemory), bench's bare
//       loop after its load (launch::MakeResident);
//   --hugepages (on by default; --no-hugepages) the mapped checkpoint files
//       move, in place, into anonymous memory backed by transparent huge
//       pages (launch/huge_pages.h; docs/deploy.md "Huge pages"): the engine
//       does it after its memory plan (EngineOptions::hugepages, set by
//       PlaceMemory), bench's bare loop after its load.
// serve, generate and bench take these flags; serve's /health answers 503
// until they are done.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "launch/engine_options.h"

namespace dsv4::cli {

struct ResidencyFlags {
  bool mlock = false;
  bool populate = false;
  bool hugepages = true;
  std::string numa = "none";
};
void AddResidencyFlags(CLI::App* cmd, ResidencyFlags* flags);

// Parses --numa into options->numa and passes --hugepages, --populate and
// --mlock on (options->hugepages, ->populate, ->mlock).  One process (--ep 1): applies it
// before the model loads, logging the line; with node:N (or auto's node) on
// a multi-node host, --cpu-list auto and --threads 0, options->cpu_list
// becomes that node's cores (the threads follow the memory).  --ep > 1:
// nothing more here: every rank, rank 0 included, places itself from the
// options rank 0 broadcasts (launch/ranks.cc), so cpu_list stays unresolved.
Status PlaceMemory(const ResidencyFlags& flags, launch::EngineOptions* options);

}  // namespace dsv4::cli
