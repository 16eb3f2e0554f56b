// Which CPUs this process may run on and how they map onto physical cores and
// NUMA nodes (Linux sysfs), for the default thread count and thread pinning
// (docs/kernels.md "Threads and CPUs").
#pragma once

#include <pthread.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

inline constexpr const char* kSysCpuRoot = "/sys/devices/system/cpu";

struct CpuPlace {
  int cpu = 0;      // logical CPU number
  int core = 0;     // core id within the package (SMT siblings share it)
  int package = 0;  // socket
  int node = 0;     // NUMA node (0 where the kernel reports none)
};

// The logical CPUs of this process's affinity mask, ascending.
std::vector<int> AffinityCpus();

// The places of `cpus` read from `sys_root` (normally /sys/devices/system/cpu):
// cpuN/topology/{core_id,physical_package_id} and the cpuN/nodeM link.
// NotFound naming the file when a CPU's topology is unreadable.
Result<std::vector<CpuPlace>> ReadCpuPlaces(const std::string& sys_root,
                                            const std::vector<int>& cpus);

// One CPU per physical core of the node of places[0] (the lowest-numbered
// hardware thread of each core), ascending: a compute thread per core of one
// node, so a default pool neither shares cores between SMT siblings nor
// straddles the interconnect.
std::vector<int> OneNodeCoreCpus(const std::vector<CpuPlace>& places);

// Which CPUs to pin compute threads to (empty: none), from the --threads
// value (*threads, 0 = choose) and the --cpu-list value: "" or "none" = no
// pinning; "auto" = when *threads is 0 and the topology is known (`places`
// non-null), one CPU per physical core of one node (OneNodeCoreCpus), setting
// *threads to their number; otherwise a CPU list (ParseCpuList) of CPUs in
// `allowed`, one per thread, *threads 0 (set to its length) or equal to it.
// InvalidArgument starting "--cpu-list" otherwise.
Result<std::vector<int>> ChoosePinning(int* threads, const std::string& cpu_list,
                                       const std::vector<int>& allowed,
                                       const std::vector<CpuPlace>* places);

// Restricts `thread` to run on `cpu` only.  InvalidArgument naming the CPU
// when the OS refuses (not in the process's cpuset, offline, out of range).
Status PinThread(pthread_t thread, int cpu);

// Parses a CPU list as the kernel writes one ("0-3,8,10-11"); rejects empty
// items, reversed ranges, duplicates and numbers outside [0, 65535].
Result<std::vector<int>> ParseCpuList(const std::string& text);

}  // namespace dsv4
