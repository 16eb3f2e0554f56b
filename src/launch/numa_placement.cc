#include "launch/numa_placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <numa.h>

#include <algorithm>
#include <cstdlib>
#include <regex>

#include "base/logging.h"

namespace dsv4::launch {

Result<NumaPlan> ParseNuma(const std::string& text) {
  static const std::regex kNode(R"(^node[:= ]([0-9]{1,4})$)");
  NumaPlan plan;
  std::smatch m;
  if (text == "none") return plan;
  if (text == "interleave" || text == "auto") {
    plan.mode = text == "auto" ? NumaPlan::Mode::kAuto : NumaPlan::Mode::kInterleave;
    return plan;
  }
  if (std::regex_match(text, m, kNode)) {
    plan.mode = NumaPlan::Mode::kNode;
    plan.node = std::stoi(m[1].str());
    return plan;
  }
  return InvalidArgument("--numa must be none, interleave, auto or node:N, got \"{}\"", text);
}

NumaPlan ResolveNuma(const NumaPlan& plan, int local_rank, int num_nodes) {
  if (plan.mode != NumaPlan::Mode::kAuto) return plan;
  NumaPlan resolved;
  resolved.mode = NumaPlan::Mode::kNode;
  resolved.node = num_nodes > 0 ? std::max(local_rank, 0) % num_nodes : 0;
  return resolved;
}

Result<std::string> ApplyNuma(const NumaPlan& plan, int num_nodes) {
  DSV4_CHECK(plan.mode != NumaPlan::Mode::kAuto);
  if (plan.mode == NumaPlan::Mode::kNone) return std::string("numa: none (the kernel's default)");
  const bool have_libnuma = numa_available() >= 0;
  if (num_nodes < 0) num_nodes = HostNumaNodes();
  if (plan.mode == NumaPlan::Mode::kNode && plan.node >= num_nodes) {
    return InvalidArgument("--numa node:{}: the host has {} NUMA node{} (0..{})", plan.node,
                           num_nodes, num_nodes == 1 ? "" : "s", num_nodes - 1);
  }
  const std::string what = plan.mode == NumaPlan::Mode::kInterleave
                               ? std::string("interleave")
                               : fmt::format("node:{}", plan.node);
  if (num_nodes <= 1 || !have_libnuma) {
    return fmt::format("numa: {} is a no-op: the host has one NUMA node", what);
  }
  if (plan.mode == NumaPlan::Mode::kInterleave) {
    numa_set_interleave_mask(numa_all_nodes_ptr);
    return fmt::format("numa: weights and caches interleaved over {} nodes", num_nodes);
  }
  // Preferred, not bound: a node that fills up spills to the others instead
  // of failing an allocation (or SIGBUS on a mapped page).
  numa_set_preferred(plan.node);
  return fmt::format(
      "numa: weights and caches placed on node {} (of {}; preferred, spills when "
      "full)",
      plan.node, num_nodes);
}

std::string NodeCpuList(const std::vector<CpuPlace>& places, int node) {
  std::vector<CpuPlace> on_node;
  for (const CpuPlace& p : places) {
    if (p.node == node) on_node.push_back(p);
  }
  if (on_node.empty()) return "";
  return fmt::format("{}", fmt::join(OneNodeCoreCpus(on_node), ","));
}

int LocalRank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return std::atoi(v);
  }
  return 0;
}

int HostNumaNodes() { return numa_available() >= 0 ? numa_num_configured_nodes() : 1; }

Result<Placement> PlaceProcess(const std::string& numa, int threads, const std::string& cpu_list,
                               int local_rank) {
  DSV4_ASSIGN_OR_RETURN(const NumaPlan given, ParseNuma(numa));
  const int nodes = HostNumaNodes();
  Placement p;
  p.plan = ResolveNuma(given, local_rank, nodes);
  p.cpu_list = cpu_list;
  DSV4_ASSIGN_OR_RETURN(const std::string line, ApplyNuma(p.plan, nodes));
  if (given.mode == NumaPlan::Mode::kAuto) {
    DSV4_LOG_INFO("numa auto: local rank {} of a host with {} node{} -> node {}; {}", local_rank,
                  nodes, nodes == 1 ? "" : "s", p.plan.node, line);
    p.summary = fmt::format("numa auto: node {}", p.plan.node);
  } else {
    DSV4_LOG_INFO("{}", line);
    if (given.mode == NumaPlan::Mode::kInterleave) p.summary = "numa interleave";
    if (given.mode == NumaPlan::Mode::kNode) p.summary = fmt::format("numa node:{}", given.node);
  }
  if (p.plan.mode != NumaPlan::Mode::kNode || nodes <= 1 || threads != 0 || cpu_list != "auto") {
    return p;
  }
  Result<std::vector<CpuPlace>> places = ReadCpuPlaces(kSysCpuRoot, AffinityCpus());
  if (!places.ok()) return p;  // --cpu-list auto decides as without --numa
  const std::string cpus = NodeCpuList(*places, p.plan.node);
  if (cpus.empty()) {
    return InvalidArgument("--numa {}: none of this process's CPUs is on node {}", numa,
                           p.plan.node);
  }
  p.cpu_list = cpus;
  DSV4_LOG_INFO("numa: compute threads on node {}'s cores ({})", p.plan.node, cpus);
  return p;
}

}  // namespace dsv4::launch
