#include "launch/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <regex>
#include <sstream>
#include <utility>

#include "base/clock.h"
#include "base/file_util.h"
#include "base/progress.h"
#include "base/status.h"
#include "launch/host_memory.h"

namespace dsv4::launch {
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
int64_t MemAvailableBytes() {
  return KibFieldBytes(ReadPseudoFile("/proc/meminfo"), "MemAvailable:");
}

// AnonHugePages of this process, bytes (0 if unknown).
int64_t AnonHugeBytes() {
  return KibFieldBytes(ReadPseudoFile("/proc/self/smaps_rollup"), "AnonHugePages:");
}

}  // namespace

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

std::string ThpMode(const std::string& enabled_text) {
  for (const char* mode : {"always", "madvise", "never"}) {
    if (enabled_text.find(fmt::format("[{}]", mode)) != std::string::npos) return mode;
  }
  return "";
}

std::vector<AddressRange> PiecesOutside(uintptr_t begin, uintptr_t end,
                                        std::vector<AddressRange> skip, uintptr_t align) {
  std::sort(skip.begin(), skip.end());
  std::vector<AddressRange> merged;
  for (const AddressRange& k : skip) {
    if (!merged.empty() && k.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, k.second);
    } else {
      merged.push_back(k);
    }
  }
  std::vector<AddressRange> pieces;
  uintptr_t at = begin;
  for (const AddressRange& k : merged) {
    // Only whole blocks inside a skipped range stay out.
    const uintptr_t kb = std::max(begin, (k.first + align - 1) & ~(align - 1));
    const uintptr_t ke = std::min(end, k.second & ~(align - 1));
    if (kb >= ke || ke <= at) continue;
    if (kb > at) pieces.emplace_back(at, kb);
    at = ke;
  }
  if (at < end) pieces.emplace_back(at, end);
  return pieces;
}

std::vector<AddressRange> MovedPieces(uintptr_t begin, uintptr_t end,
                                      std::vector<AddressRange> keep) {
  return PiecesOutside(begin, end, std::move(keep), kHugePage);
}

std::string MoveCheckpointsToHugePages(const std::vector<AddressRange>& keep) {
  const std::string mode = ThpMode(ReadPseudoFile("/sys/kernel/mm/transparent_hugepage/enabled"));
  if (mode == "never" || mode.empty()) {
    return fmt::format(
        "hugepages: transparent huge pages are {} on this host; the weights stay "
        "in the page cache's 4 KiB pages",
        mode.empty() ? "unavailable" : "off");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t huge_before = AnonHugeBytes();
  const std::vector<MappedRegion> regions = CheckpointRegions(ReadPseudoFile("/proc/self/maps"));
  struct Piece {
    uintptr_t begin, end;
    const std::string* path;
  };
  std::vector<Piece> pieces;
  int64_t mapped = 0, total = 0;
  // Each region is given only the kept ranges that start inside it (a
  // tensor lies within one file), not all of them (Flash: ~10^5 tensors).
  std::vector<AddressRange> sorted_keep = keep;
  std::sort(sorted_keep.begin(), sorted_keep.end());
  for (const MappedRegion& region : regions) {
    mapped += static_cast<int64_t>(region.end - region.begin);
    const uintptr_t begin = (region.begin + kHugePage - 1) & ~(kHugePage - 1);
    const uintptr_t end = region.end & ~(kHugePage - 1);
    if (begin >= end) continue;
    const auto first =
        std::lower_bound(sorted_keep.begin(), sorted_keep.end(), AddressRange{region.begin, 0});
    const auto last = std::lower_bound(first, sorted_keep.end(), AddressRange{region.end, 0});
    for (const auto& [b, e] : MovedPieces(begin, end, std::vector<AddressRange>(first, last))) {
      pieces.push_back({b, e, &region.path});
      total += static_cast<int64_t>(e - b);
    }
  }
  // Anonymous memory cannot be dropped and re-read like the page cache: on a
  // host that cannot hold the weights (they stream from disk) moving them
  // would end in swap or the OOM killer.  MemAvailable counts the page
  // cache's reclaimable pages, the checkpoint's own among them.
  const int64_t available = MemAvailableBytes();
  if (available > 0 && total > available / 10 * 9) {
    return fmt::format(
        "hugepages: the mapped checkpoint ({}) is more than 90% of the memory "
        "available ({}); the weights stay in the page cache's 4 KiB pages",
        FormatBytes(total), FormatBytes(available));
  }
  constexpr uintptr_t kChunk = uintptr_t{256} << 20;  // bounds the transient second copy
  int64_t moved = 0;
  Progress progress("hugepages", total, ProgressUnit::kBytes);
  for (const Piece& piece : pieces) {
    for (uintptr_t a = piece.begin; a < piece.end; a += kChunk) {
      const uintptr_t stop = std::min(piece.end, a + kChunk);
      // A chunk that cannot move stays file pages (MoveToHugePages leaves
      // it untouched): the weights are intact either way, so the engine
      // starts, with a line saying how far the move got.
      if (Status s = MoveToHugePages(a, stop); !s.ok()) {
        progress.Finish();
        return fmt::format(
            "hugepages: stopped after {} ({}: {}); the rest stays in the page "
            "cache's 4 KiB pages",
            FormatBytes(moved), *piece.path, s.message());
      }
      moved += static_cast<int64_t>(stop - a);
      progress.Add(static_cast<int64_t>(stop - a));
    }
  }
  progress.Finish();
  return fmt::format(
      "hugepages: {} of mapped checkpoint moved into anonymous memory (THP mode {}) in {:.2f} s, "
      "{} of it in huge pages; {} not moved (tensors the model copied into its own layouts, the "
      "files' unaligned ends)",
      FormatBytes(moved), mode, SecondsSince(t0), FormatBytes(AnonHugeBytes() - huge_before),
      FormatBytes(std::max<int64_t>(0, mapped - moved)));
}

}  // namespace dsv4::launch
