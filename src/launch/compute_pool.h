// The compute thread pool of an engine or a benchmark, sized and placed from
// --threads and --cpu-list (docs/kernels.md "Threads and CPUs").
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"

namespace dsv4::launch {

// threads: the --threads flag (0 = one per physical core of one NUMA node).
// cpu_list: "" or "none" = no pinning; "auto" = pin to those cores when the
// count was chosen here (threads 0), else no pinning; otherwise a CPU list
// ("0-3,8"), one CPU per thread, every CPU allowed to the process, and
// threads 0 or equal to its length.  InvalidArgument naming the flag.
Result<std::unique_ptr<ThreadPool>> CreateComputePool(int threads, const std::string& cpu_list);

}  // namespace dsv4::launch
