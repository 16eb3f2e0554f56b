#include "residency.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/clock.h"
#include "base/file_util.h"
#include "base/logging.h"
#include "base/progress.h"
#include "launch/huge_pages.h"
#include "launch/numa_placement.h"

namespace dsv4::cli {
namespace {

// "1.5 GiB", or MiB below 1 GiB (a tiny model).
std::string Gib(int64_t bytes) {
  const auto b = static_cast<double>(bytes);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  return fmt::format("{:.1f} GiB", b / double(int64_t{1} << 30));
}

// VmSize of this process (what mlockall(MCL_CURRENT) counts against the
// limit), 0 if unknown.
int64_t MappedBytes() { return KibFieldBytes(ReadPseudoFile("/proc/self/status"), "VmSize:"); }

}  // namespace

void AddResidencyFlags(CLI::App* cmd, ResidencyFlags* f) {
  cmd->add_flag("--mlock", f->mlock,
                "Lock weights and caches in RAM after loading (mlockall; needs RLIMIT_MEMLOCK, "
                "ulimit -l, above the process size)");
  cmd->add_flag("--populate", f->populate,
                "Read every page of the mapped checkpoint before serving (a progress line, the "
                "time taken in the log)");
  cmd->add_flag("--hugepages,!--no-hugepages", f->hugepages,
                "Move the mapped weights into transparent huge pages after loading (faster "
                "weight streaming; the page cache's copy is then no longer shared with other "
                "processes)")
      ->capture_default_str();
  cmd->add_option("--numa", f->numa,
                  "Memory placement of weights and caches: none, interleave (all nodes), "
                  "node:N, or auto (node local_rank % nodes: one node per rank under mpirun, "
                  "node 0 for one process); a no-op on a one-node host")
      ->capture_default_str();
}

Result<std::string> PopulateCheckpointMappings() {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<launch::MappedRegion> regions =
      launch::CheckpointRegions(ReadPseudoFile("/proc/self/maps"));
  int64_t total = 0;
  for (const launch::MappedRegion& r : regions) total += static_cast<int64_t>(r.end - r.begin);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  Progress progress("populate", total, ProgressUnit::kBytes);
  volatile uint8_t sink = 0;
  for (const launch::MappedRegion& r : regions) {
    // The kernel reads ahead in large requests; the touch makes sure every
    // page is in before the engine counts as ready.
    ::madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, MADV_WILLNEED);
    constexpr uintptr_t kStep = uintptr_t{64} << 20;  // progress granularity
    for (uintptr_t a = r.begin; a < r.end; a += kStep) {
      const uintptr_t stop = std::min(r.end, a + kStep);
      for (uintptr_t p = a; p < stop; p += page) sink = sink + *reinterpret_cast<const uint8_t*>(p);
      progress.Add(static_cast<int64_t>(stop - a));
    }
  }
  progress.Finish();
  (void)sink;
  return fmt::format("populate: {} of mapped checkpoint ({} regions) resident in {:.2f} s",
                     Gib(total), regions.size(), SecondsSince(t0));
}

std::string MlockError(int err, int64_t limit_bytes, int64_t mapped_bytes) {
  const std::string limit =
      limit_bytes < 0 ? std::string("unlimited")
                      : fmt::format("{:.1f} MiB", static_cast<double>(limit_bytes) / (1 << 20));
  return fmt::format(
      "--mlock: mlockall failed ({}): the locked-memory limit RLIMIT_MEMLOCK is {} and the "
      "process maps {}; raise it (ulimit -l unlimited, systemd LimitMEMLOCK=infinity, docker "
      "--ulimit memlock=-1) or run without --mlock",
      std::strerror(err), limit, Gib(mapped_bytes));
}

Result<std::string> LockAllMemory() {
  const auto t0 = std::chrono::steady_clock::now();
  if (::mlockall(MCL_CURRENT) != 0) {
    const int err = errno;
    rlimit lim{};
    int64_t limit = -1;
    if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
      limit = static_cast<int64_t>(lim.rlim_cur);
    }
    return FailedPrecondition("{}", MlockError(err, limit, MappedBytes()));
  }
  return fmt::format("mlock: {} of weights, caches and working memory locked in {:.2f} s",
                     Gib(MappedBytes()), SecondsSince(t0));
}

Status PlaceMemory(const ResidencyFlags& flags, launch::EngineOptions* options) {
  DSV4_RETURN_IF_ERROR(launch::ParseNuma(flags.numa).status());
  options->numa = flags.numa;
  options->hugepages = flags.hugepages;
  if (options->ep > 1) return Status::Ok();
  DSV4_ASSIGN_OR_RETURN(
      const launch::Placement placed,
      launch::PlaceProcess(flags.numa, options->threads, options->cpu_list, /*local_rank=*/0));
  options->cpu_list = placed.cpu_list;
  return Status::Ok();
}

Status MakeResident(const ResidencyFlags& flags) {
  if (flags.populate) {
    DSV4_ASSIGN_OR_RETURN(std::string line, PopulateCheckpointMappings());
    DSV4_LOG_INFO("{}", line);
  }
  if (flags.mlock) {
    DSV4_ASSIGN_OR_RETURN(std::string line, LockAllMemory());
    DSV4_LOG_INFO("{}", line);
  }
  return Status::Ok();
}

}  // namespace dsv4::cli
