// NUMA placement of one process (docs/deploy.md "NUMA placement"): the
// memory policy set before the model loads, so the caches and the pages the
// compute threads fault in follow it, and the compute threads' CPUs.  Every
// rank of an expert-parallel run applies it itself from the options rank 0
// broadcasts (followers parse no command line), before loading its shard.
#pragma once

#include <string>
#include <vector>

#include "base/cpu_topology.h"
#include "base/status.h"

namespace dsv4::launch {

struct NumaPlan {
  // kAuto: node (local rank % nodes), resolved per process by ResolveNuma.
  enum class Mode { kNone, kInterleave, kNode, kAuto };
  Mode mode = Mode::kNone;
  int node = -1;  // kNode
};
// "none", "interleave", "auto", "node:N" (also "node=N" or "node N").
Result<NumaPlan> ParseNuma(const std::string& text);

// kAuto becomes kNode at local_rank % num_nodes (one process without mpirun
// is local rank 0: node 0, the node `--threads 0` already takes its cores
// from); other plans are returned as they are.
NumaPlan ResolveNuma(const NumaPlan& plan, int local_rank, int num_nodes);

// Sets the memory policy of the calling thread (threads started later
// inherit it) for a host with num_nodes nodes (libnuma's count when
// num_nodes < 0) and returns the log line.  InvalidArgument for a node the
// host does not have.  REQUIRES: a resolved plan (not kAuto), called before
// the model loads and before the compute threads start.
Result<std::string> ApplyNuma(const NumaPlan& plan, int num_nodes = -1);

// node:N with --cpu-list auto and --threads 0: one CPU per physical core of
// node N (not of the first node, --cpu-list auto's choice), as a CPU list
// ("8,9,10"); empty when node N has none of `places`.  Pure.
std::string NodeCpuList(const std::vector<CpuPlace>& places, int node);

// This process's rank among the ranks on its host (OpenMPI's
// OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID); 0 without either.
int LocalRank();
// NUMA nodes of the host (libnuma; 1 without it).
int HostNumaNodes();

struct Placement {
  NumaPlan plan;         // resolved (never kAuto)
  std::string cpu_list;  // what the compute pool should use
  std::string summary;   // "numa auto: node 1" for the rank's start-up line; "" for none
};
// Parses `numa`, resolves it for local_rank, applies it (logging the line)
// and, with node:N (given or chosen by auto) on a multi-node host,
// --cpu-list auto and --threads 0, moves the compute threads to node N's
// cores.  InvalidArgument naming --numa for a bad value or a missing node.
Result<Placement> PlaceProcess(const std::string& numa, int threads, const std::string& cpu_list,
                               int local_rank);

}  // namespace dsv4::launch
