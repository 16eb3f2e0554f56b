#include "launch/residency.h"

#include <fmt/format.h>
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
#include "launch/host_memory.h"

namespace dsv4::launch {
namespace {

// VmSize of this process (what mlockall(MCL_CURRENT) counts against the
// limit), 0 if unknown.
int64_t MappedBytes() { return KibFieldBytes(ReadPseudoFile("/proc/self/status"), "VmSize:"); }

struct Pages {
  std::vector<AddressRange> pieces;  // to read
  int64_t mapped = 0;                // bytes of the regions
  int64_t skipped = 0;               // of them left out
  size_t regions = 0;
};

// The mapped checkpoint's pages outside the skip ranges.  Each region gets
// only the ranges that start inside it (a tensor lies within one file), not
// all of them (Flash: ~10^5 tensors).
Pages PagesToRead(const std::vector<AddressRange>& skip) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::vector<AddressRange> sorted = skip;
  std::sort(sorted.begin(), sorted.end());
  Pages p;
  const std::vector<MappedRegion> regions = CheckpointRegions(ReadPseudoFile("/proc/self/maps"));
  p.regions = regions.size();
  for (const MappedRegion& r : regions) {
    p.mapped += static_cast<int64_t>(r.end - r.begin);
    const auto first = std::lower_bound(sorted.begin(), sorted.end(), AddressRange{r.begin, 0});
    const auto last = std::lower_bound(first, sorted.end(), AddressRange{r.end, 0});
    for (const AddressRange& piece :
         PiecesOutside(r.begin, r.end, std::vector<AddressRange>(first, last), page)) {
      p.pieces.push_back(piece);
      p.skipped -= static_cast<int64_t>(piece.second - piece.first);
    }
    p.skipped += static_cast<int64_t>(r.end - r.begin);
  }
  return p;
}

// Reads one byte per page of the pieces, with a progress line.
void ReadPages(const std::vector<AddressRange>& pieces, int64_t total) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  Progress progress("populate", total, ProgressUnit::kBytes);
  volatile uint8_t sink = 0;
  for (const auto& [begin, end] : pieces) {
    // The kernel reads ahead in large requests; the touch makes sure every
    // page is in before the engine counts as ready.
    ::madvise(reinterpret_cast<void*>(begin & ~(page - 1)), end - (begin & ~(page - 1)),
              MADV_WILLNEED);
    constexpr uintptr_t kStep = uintptr_t{64} << 20;  // progress granularity
    for (uintptr_t a = begin; a < end; a += kStep) {
      const uintptr_t stop = std::min(end, a + kStep);
      for (uintptr_t q = a; q < stop; q += page) sink = sink + *reinterpret_cast<const uint8_t*>(q);
      progress.Add(static_cast<int64_t>(stop - a));
    }
  }
  progress.Finish();
  (void)sink;
}

}  // namespace

Result<std::string> PopulateCheckpointMappings(const std::vector<AddressRange>& skip) {
  const auto t0 = std::chrono::steady_clock::now();
  const Pages p = PagesToRead(skip);
  ReadPages(p.pieces, p.mapped - p.skipped);
  std::string line =
      fmt::format("populate: {} of mapped checkpoint ({} regions) resident in {:.2f} s",
                  FormatBytes(p.mapped - p.skipped), p.regions, SecondsSince(t0));
  if (p.skipped > 0) {
    line +=
        fmt::format("; {} the model copied into its own layouts left out", FormatBytes(p.skipped));
  }
  return line;
}

std::string MlockError(int err, int64_t limit_bytes, int64_t mapped_bytes) {
  const std::string limit = limit_bytes < 0 ? std::string("unlimited") : FormatBytes(limit_bytes);
  return fmt::format(
      "--mlock: mlockall failed ({}): the locked-memory limit RLIMIT_MEMLOCK is {} and the "
      "process maps {}; raise it (ulimit -l unlimited, systemd LimitMEMLOCK=infinity, docker "
      "--ulimit memlock=-1) or run without --mlock",
      std::strerror(err), limit, FormatBytes(mapped_bytes));
}

Result<std::string> LockAllMemory(const std::vector<AddressRange>& skip) {
  const auto t0 = std::chrono::steady_clock::now();
  int flags = MCL_CURRENT;
  if (!skip.empty()) {
    const Pages p = PagesToRead(skip);
    ReadPages(p.pieces, p.mapped - p.skipped);
    flags |= MCL_ONFAULT;
  }
  int rc = ::mlockall(flags);
  // A kernel before 4.4 has no MCL_ONFAULT: everything is faulted in then.
  if (rc != 0 && errno == EINVAL && flags != MCL_CURRENT) rc = ::mlockall(MCL_CURRENT);
  if (rc != 0) {
    const int err = errno;
    rlimit lim{};
    int64_t limit = -1;
    if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
      limit = static_cast<int64_t>(lim.rlim_cur);
    }
    return FailedPrecondition("{}", MlockError(err, limit, MappedBytes()));
  }
  return fmt::format("mlock: {} of weights, caches and working memory locked in {:.2f} s",
                     FormatBytes(MappedBytes()), SecondsSince(t0));
}

Status MakeResident(bool populate, bool mlock, const std::vector<AddressRange>& skip) {
  if (populate) {
    DSV4_ASSIGN_OR_RETURN(std::string line, PopulateCheckpointMappings(skip));
    DSV4_LOG_INFO("{}", line);
  }
  if (mlock) {
    DSV4_ASSIGN_OR_RETURN(std::string line, LockAllMemory(skip));
    DSV4_LOG_INFO("{}", line);
  }
  return Status::Ok();
}

}  // namespace dsv4::launch
