#include "base/cpu_topology.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

namespace dsv4 {
namespace {

bool ReadInt(const std::filesystem::path& path, int* out) {
  std::ifstream in(path);
  return static_cast<bool>(in >> *out);
}

// The node of a CPU: sysfs links cpuN/nodeM on NUMA kernels; none means one node.
int NodeOf(const std::filesystem::path& cpu_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(cpu_dir, ec)) {
    const std::string name = entry.path().filename().string();
    int node = 0;
    if (name.size() > 4 && name.compare(0, 4, "node") == 0 &&
        std::from_chars(name.data() + 4, name.data() + name.size(), node).ec == std::errc()) {
      return node;
    }
  }
  return 0;
}

Result<int> ParseCpuNumber(std::string_view s, const std::string& text) {
  int v = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0 || v > 65535) {
    return InvalidArgument("CPU list '{}': '{}' is not a CPU number", text, s);
  }
  return v;
}

}  // namespace

std::vector<int> AffinityCpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

Result<std::vector<CpuPlace>> ReadCpuPlaces(const std::string& sys_root,
                                            const std::vector<int>& cpus) {
  std::vector<CpuPlace> places;
  for (int cpu : cpus) {
    const std::filesystem::path dir =
        std::filesystem::path(sys_root) / ("cpu" + std::to_string(cpu));
    CpuPlace p;
    p.cpu = cpu;
    for (auto [file, out] : {std::pair{"topology/core_id", &p.core},
                             std::pair{"topology/physical_package_id", &p.package}}) {
      if (!ReadInt(dir / file, out)) return NotFound("cannot read {}", (dir / file).string());
    }
    p.node = NodeOf(dir);
    places.push_back(p);
  }
  return places;
}

std::vector<int> OneNodeCoreCpus(const std::vector<CpuPlace>& places) {
  std::vector<int> cpus;
  if (places.empty()) return cpus;
  std::vector<CpuPlace> sorted = places;
  std::sort(sorted.begin(), sorted.end(),
            [](const CpuPlace& a, const CpuPlace& b) { return a.cpu < b.cpu; });
  const int node = places.front().node;
  std::set<std::pair<int, int>> seen;  // (package, core)
  for (const CpuPlace& p : sorted) {
    if (p.node == node && seen.insert({p.package, p.core}).second) cpus.push_back(p.cpu);
  }
  return cpus;
}

Result<std::vector<int>> ChoosePinning(int* threads, const std::string& cpu_list,
                                       const std::vector<int>& allowed,
                                       const std::vector<CpuPlace>* places) {
  if (cpu_list.empty() || cpu_list == "none") return std::vector<int>{};
  if (cpu_list == "auto") {
    if (*threads > 0 || places == nullptr) return std::vector<int>{};
    std::vector<int> cpus = OneNodeCoreCpus(*places);
    if (!cpus.empty()) *threads = static_cast<int>(cpus.size());
    return cpus;
  }
  Result<std::vector<int>> cpus = ParseCpuList(cpu_list);
  if (!cpus.ok()) return InvalidArgument("--cpu-list: {}", cpus.status().message());
  for (int c : *cpus) {
    if (std::find(allowed.begin(), allowed.end(), c) == allowed.end()) {
      return InvalidArgument("--cpu-list: CPU {} is not available to this process ({} CPUs are)", c,
                             allowed.size());
    }
  }
  const int n = static_cast<int>(cpus->size());
  if (*threads > 0 && *threads != n) {
    return InvalidArgument("--cpu-list names {} CPUs for --threads {}; give one CPU per thread", n,
                           *threads);
  }
  *threads = n;
  return cpus;
}

Status PinThread(pthread_t thread, int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return InvalidArgument("CPU {} does not exist", cpu);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (const int err = pthread_setaffinity_np(thread, sizeof(set), &set); err != 0) {
    return InvalidArgument("cannot pin a thread to CPU {} ({})", cpu, std::strerror(err));
  }
  return Status::Ok();
}

Result<std::vector<int>> ParseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::set<int> seen;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t dash = item.find('-');
    DSV4_ASSIGN_OR_RETURN(const int lo, ParseCpuNumber(item.substr(0, dash), text));
    int hi = lo;
    if (dash != std::string_view::npos) {
      DSV4_ASSIGN_OR_RETURN(hi, ParseCpuNumber(item.substr(dash + 1), text));
      if (hi < lo) return InvalidArgument("CPU list '{}': range '{}' runs backwards", text, item);
    }
    for (int c = lo; c <= hi; ++c) {
      if (!seen.insert(c).second) return InvalidArgument("CPU list '{}': CPU {} twice", text, c);
      cpus.push_back(c);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return cpus;
}

}  // namespace dsv4
