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
#include <fstream>
#include <regex>
#include <sstream>

#include "base/logging.h"
#include "base/progress.h"
#include "launch/numa_placement.h"

namespace dsv4::cli {
namespace {

// "1.5 GiB", or MiB below 1 GiB (a tiny model).
std::string Gib(int64_t bytes) {
  const auto b = static_cast<double>(bytes);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  return fmt::format("{:.1f} GiB", b / double(int64_t{1} << 30));
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The bytes of the "Key:   N kB" line of a /proc file, 0 if it has none.
int64_t ProcKibField(const std::string& path, const std::string& key) {
  std::istringstream text(ReadText(path));
  std::string line;
  while (std::getline(text, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + key.size()) * 1024;
  }
  return 0;
}

// VmSize of this process (what mlockall(MCL_CURRENT) counts against the
// limit), 0 if unknown.
int64_t MappedBytes() { return ProcKibField("/proc/self/status", "VmSize:"); }

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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

std::vector<MappedRegion> CheckpointRegions(const std::string& maps_text) {
  // begin-end perms offset dev inode path
  static const std::regex kLine(R"(^([0-9a-f]+)-([0-9a-f]+) (r)\S* \S+ \S+ \S+\s+(\S.*)$)");
  std::vector<MappedRegion> out;
  std::istringstream in(maps_text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, kLine)) continue;
    const std::string path = m[4].str();
    static const std::string kExt = ".safetensors";
    if (path.size() < kExt.size() || path.compare(path.size() - kExt.size(), kExt.size(), kExt)) {
      continue;
    }
    out.push_back({static_cast<uintptr_t>(std::stoull(m[1].str(), nullptr, 16)),
                   static_cast<uintptr_t>(std::stoull(m[2].str(), nullptr, 16)), path});
  }
  return out;
}

Result<std::string> PopulateCheckpointMappings() {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<MappedRegion> regions = CheckpointRegions(ReadText("/proc/self/maps"));
  int64_t total = 0;
  for (const MappedRegion& r : regions) total += static_cast<int64_t>(r.end - r.begin);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  Progress progress("populate", total, ProgressUnit::kBytes);
  volatile uint8_t sink = 0;
  for (const MappedRegion& r : regions) {
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

std::string ThpMode(const std::string& enabled_text) {
  for (const char* mode : {"always", "madvise", "never"}) {
    if (enabled_text.find(fmt::format("[{}]", mode)) != std::string::npos) return mode;
  }
  return "";
}

namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

// Replaces [begin, end) (2 MiB aligned, mapped) with an anonymous read-only
// copy advised MADV_HUGEPAGE, at the same addresses.
Status MoveToHugePages(uintptr_t begin, uintptr_t end) {
  const size_t len = end - begin;
  void* raw = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return IoError("--hugepages: mmap failed: {}", std::strerror(errno));
  const auto r = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t a = (r + kHugePage - 1) & ~(kHugePage - 1);  // aligned like the target
  auto* to = reinterpret_cast<void*>(a);
  ::madvise(to, len, MADV_HUGEPAGE);  // advisory: without it the copy still works
  std::memcpy(to, reinterpret_cast<const void*>(begin), len);
  void* moved = MAP_FAILED;
  if (::mprotect(to, len, PROT_READ) == 0) {
    moved = ::mremap(to, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(begin));
  }
  const int err = errno;
  // What is left of the staging region: its unaligned head and tail, or all
  // of it when the move failed (the file mapping is then untouched).
  if (moved == MAP_FAILED) {
    ::munmap(raw, len + kHugePage);
    return IoError("--hugepages: moving {} bytes failed: {}", len, std::strerror(err));
  }
  if (a > r) ::munmap(raw, a - r);
  if (r + kHugePage > a) ::munmap(reinterpret_cast<void*>(a + len), r + kHugePage - a);
  return Status::Ok();
}

// MemAvailable of the host, bytes (0 if unknown).
int64_t MemAvailableBytes() { return ProcKibField("/proc/meminfo", "MemAvailable:"); }

// AnonHugePages of this process, bytes (0 if unknown).
int64_t AnonHugeBytes() { return ProcKibField("/proc/self/smaps_rollup", "AnonHugePages:"); }

}  // namespace

Result<std::string> MoveCheckpointsToHugePages() {
  const std::string mode = ThpMode(ReadText("/sys/kernel/mm/transparent_hugepage/enabled"));
  if (mode == "never" || mode.empty()) {
    return fmt::format(
        "hugepages: transparent huge pages are {} on this host; the weights stay "
        "in the page cache's 4 KiB pages",
        mode.empty() ? "unavailable" : "off");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t huge_before = AnonHugeBytes();
  const std::vector<MappedRegion> regions = CheckpointRegions(ReadText("/proc/self/maps"));
  int64_t total = 0;
  for (const MappedRegion& r : regions) total += static_cast<int64_t>(r.end - r.begin);
  // Anonymous memory cannot be dropped and re-read like the page cache: on a
  // host that cannot hold the weights (they stream from disk) moving them
  // would end in swap or the OOM killer.  MemAvailable counts the page
  // cache's reclaimable pages, the checkpoint's own among them.
  const int64_t available = MemAvailableBytes();
  if (available > 0 && total > available / 10 * 9) {
    return fmt::format(
        "hugepages: the mapped checkpoint ({}) is more than 90% of the memory "
        "available ({}); the weights stay in the page cache's 4 KiB pages",
        Gib(total), Gib(available));
  }
  constexpr uintptr_t kChunk = uintptr_t{256} << 20;  // bounds the transient second copy
  int64_t moved = 0;
  Progress progress("hugepages", total, ProgressUnit::kBytes);
  for (const MappedRegion& region : regions) {
    const uintptr_t begin = (region.begin + kHugePage - 1) & ~(kHugePage - 1);
    const uintptr_t end = region.end & ~(kHugePage - 1);
    for (uintptr_t a = begin; a < end; a += kChunk) {
      const uintptr_t stop = std::min(end, a + kChunk);
      // A chunk that cannot move stays file pages (MoveToHugePages leaves
      // it untouched): the weights are intact either way, so the engine
      // starts, with a line saying how far the move got.
      if (Status s = MoveToHugePages(a, stop); !s.ok()) {
        progress.Finish();
        return fmt::format(
            "hugepages: stopped after {} ({}: {}); the rest stays in the page "
            "cache's 4 KiB pages",
            Gib(moved), region.path, s.message());
      }
      moved += static_cast<int64_t>(stop - a);
      progress.Add(static_cast<int64_t>(stop - a));
    }
  }
  progress.Finish();
  return fmt::format(
      "hugepages: {} of mapped checkpoint moved into anonymous memory (THP mode {}) in {:.2f} s, "
      "{} of it in huge pages",
      Gib(moved), mode, SecondsSince(t0), Gib(AnonHugeBytes() - huge_before));
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
  if (flags.hugepages) {
    DSV4_ASSIGN_OR_RETURN(std::string line, MoveCheckpointsToHugePages());
    DSV4_LOG_INFO("{}", line);
  }
  if (flags.mlock) {
    DSV4_ASSIGN_OR_RETURN(std::string line, LockAllMemory());
    DSV4_LOG_INFO("{}", line);
  }
  return Status::Ok();
}

}  // namespace dsv4::cli
