#include "launch/compute_pool.h"

#include <vector>

#include "base/cpu_topology.h"

namespace dsv4::launch {

Result<std::unique_ptr<ThreadPool>> CreateComputePool(int threads, const std::string& cpu_list) {
  const std::vector<int> allowed = AffinityCpus();
  Result<std::vector<CpuPlace>> places = ReadCpuPlaces(kSysCpuRoot, allowed);
  DSV4_ASSIGN_OR_RETURN(
      const std::vector<int> cpus,
      ChoosePinning(&threads, cpu_list, allowed, places.ok() ? &*places : nullptr));
  if (threads <= 0) threads = ThreadPool::DefaultThreads();
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(threads));
  if (!cpus.empty()) DSV4_RETURN_IF_ERROR(pool->PinTo(cpus));
  return pool;
}

}  // namespace dsv4::launch
