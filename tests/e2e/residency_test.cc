// --numa, --populate and --mlock helpers (apps/dsv4/residency.h,
// launch/residency.h): parsing, the one-node no-op, the mapped checkpoint
// regions, the ranges populate and mlock leave out, the mlock refusal.
#include "residency.h"

#include <gtest/gtest.h>
#include <numa.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "base/file_util.h"
#include "base/mapped_file.h"
#include "launch/huge_pages.h"
#include "launch/numa_placement.h"
#include "launch/residency.h"

namespace dsv4::cli {
namespace {

using launch::ApplyNuma;
using launch::MlockError;
using launch::NodeCpuList;
using launch::NumaPlan;
using launch::ParseNuma;
using launch::PopulateCheckpointMappings;
using launch::ResolveNuma;

TEST(ResidencyTest, ParsesNumaFlag) {
  EXPECT_EQ(ParseNuma("none")->mode, NumaPlan::Mode::kNone);
  EXPECT_EQ(ParseNuma("interleave")->mode, NumaPlan::Mode::kInterleave);
  EXPECT_EQ(ParseNuma("auto")->mode, NumaPlan::Mode::kAuto);
  for (const char* text : {"node:1", "node=1", "node 1"}) {
    auto plan = ParseNuma(text);
    ASSERT_TRUE(plan.ok()) << text;
    EXPECT_EQ(plan->mode, NumaPlan::Mode::kNode);
    EXPECT_EQ(plan->node, 1);
  }
  for (const char* text : {"", "all", "node", "node:", "node:-1", "node:x", "Interleave", "Auto"}) {
    EXPECT_EQ(ParseNuma(text).status().code(), StatusCode::kInvalidArgument) << text;
  }
  EXPECT_EQ(ParseNuma("both").status().message(),
            "--numa must be none, interleave, auto or node:N, got \"both\"");
}

// auto: node local_rank % nodes (one process is local rank 0: node 0); the
// other plans are left as they are.
TEST(ResidencyTest, NumaAutoTakesTheLocalRanksNode) {
  const NumaPlan a = *ParseNuma("auto");
  const std::vector<std::tuple<int, int, int>> cases = {{0, 1, 0}, {1, 1, 0}, {0, 2, 0}, {1, 2, 1},
                                                        {2, 2, 0}, {3, 2, 1}, {5, 4, 1}};
  for (const auto& [local_rank, nodes, node] : cases) {
    const NumaPlan r = ResolveNuma(a, local_rank, nodes);
    EXPECT_EQ(r.mode, NumaPlan::Mode::kNode);
    EXPECT_EQ(r.node, node) << "local rank " << local_rank << " of " << nodes << " nodes";
  }
  EXPECT_EQ(ResolveNuma(*ParseNuma("node:3"), 1, 2).node, 3);
  EXPECT_EQ(ResolveNuma(*ParseNuma("interleave"), 1, 2).mode, NumaPlan::Mode::kInterleave);
}

// This host's case: one node.  Every placement is a no-op with a line that
// says so; a node the host lacks is refused.
TEST(ResidencyTest, NumaOnOneNodeIsANoOp) {
  EXPECT_EQ(*ApplyNuma(*ParseNuma("none"), 1), "numa: none (the kernel's default)");
  EXPECT_EQ(*ApplyNuma(*ParseNuma("interleave"), 1),
            "numa: interleave is a no-op: the host has one NUMA node");
  EXPECT_EQ(*ApplyNuma(*ParseNuma("node:0"), 1),
            "numa: node:0 is a no-op: the host has one NUMA node");
  EXPECT_EQ(ApplyNuma(*ParseNuma("node:1"), 1).status().message(),
            "--numa node:1: the host has 1 NUMA node (0..0)");
  EXPECT_EQ(ApplyNuma(*ParseNuma("node:4"), 2).status().message(),
            "--numa node:4: the host has 2 NUMA nodes (0..1)");
  // The host's own count (libnuma): node:0 always exists.
  EXPECT_TRUE(ApplyNuma(*ParseNuma("node:0")).ok());
  // auto on any local rank of a one-node host: node 0, nothing to do, and
  // the start-up line names the choice.
  if (launch::HostNumaNodes() == 1) {
    for (int local_rank : {0, 1, 3}) {
      Result<launch::Placement> p = launch::PlaceProcess("auto", 0, "auto", local_rank);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(p->plan.node, 0);
      EXPECT_EQ(p->cpu_list, "auto");
      EXPECT_EQ(p->summary, "numa auto: node 0");
    }
    EXPECT_EQ(launch::PlaceProcess("node:1", 0, "auto", 0).status().message(),
              "--numa node:1: the host has 1 NUMA node (0..0)");
  }
  EXPECT_EQ(launch::PlaceProcess("none", 0, "auto", 1)->summary, "");
}

TEST(ResidencyTest, CheckpointRegionsFromProcMaps) {
  const std::string maps =
      "7f0000000000-7f0000100000 r--s 00000000 08:01 1234   /m/model-00001.safetensors\n"
      "7f0000100000-7f0000200000 r--p 00000000 08:01 99     /usr/lib/libc.so.6\n"
      "7f0000200000-7f0000300000 ---p 00000000 00:00 0 \n"
      "7f0000300000-7f0000380000 r--s 00001000 08:01 1235   /m/dsv4 stacked r1.safetensors\n"
      "7f0000400000-7f0000480000 ---s 00000000 08:01 1236   /m/x.safetensors\n";
  const std::vector<launch::MappedRegion> r = launch::CheckpointRegions(maps);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].begin, 0x7f0000000000u);
  EXPECT_EQ(r[0].end, 0x7f0000100000u);
  EXPECT_EQ(r[0].path, "/m/model-00001.safetensors");
  EXPECT_EQ(r[1].path, "/m/dsv4 stacked r1.safetensors");  // spaces in the path
}

TEST(ResidencyTest, PopulateReadsTheMappedCheckpoint) {
  const std::string path = ::testing::TempDir() + "/residency_test.safetensors";
  std::ofstream(path) << std::string(3 << 20, 'x');
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  auto line = PopulateCheckpointMappings();
  ASSERT_TRUE(line.ok()) << line.status().message();
  EXPECT_NE(line->find("populate: "), std::string::npos) << *line;
  EXPECT_EQ(line->find("(0 regions)"), std::string::npos) << *line;
  std::filesystem::remove(path);
}

TEST(ResidencyTest, ThpModeIsTheBracketedWord) {
  EXPECT_EQ(launch::ThpMode("always [madvise] never\n"), "madvise");
  EXPECT_EQ(launch::ThpMode("[always] madvise never\n"), "always");
  EXPECT_EQ(launch::ThpMode("always madvise [never]\n"), "never");
  EXPECT_EQ(launch::ThpMode(""), "");
}

// Bytes of this process's file-backed mappings of the checkpoint file
// named `file_name` (what the huge-page move has not moved).
int64_t MappedFileBytes(const std::string& file_name) {
  int64_t n = 0;
  for (const launch::MappedRegion& r :
       launch::CheckpointRegions(ReadPseudoFile("/proc/self/maps"))) {
    if (std::filesystem::path(r.path).filename() == file_name) {
      n += static_cast<int64_t>(r.end - r.begin);
    }
  }
  return n;
}

// Resident bytes (Rss in /proc/self/smaps) of this process's mappings of the
// file named `file_name`.
int64_t ResidentFileBytes(const std::string& file_name) {
  std::istringstream in(ReadPseudoFile("/proc/self/smaps"));
  std::string line;
  bool ours = false;
  int64_t kib = 0;
  while (std::getline(in, line)) {
    // A mapping's header ("begin-end perms offset dev inode path") starts
    // with its range; its fields ("Rss:   12 kB") with a name and a colon.
    const std::string first = line.substr(0, line.find(' '));
    if (!first.empty() && first.back() != ':' && first.find('-') != std::string::npos) {
      ours = line.size() >= file_name.size() &&
             line.compare(line.size() - file_name.size(), file_name.size(), file_name) == 0;
    } else if (ours && line.rfind("Rss:", 0) == 0) {
      kib += std::stoll(line.substr(4));
    }
  }
  return kib << 10;
}

// Writes 9 MiB of a position-dependent pattern (`mul` varies it) to `path`
// and returns the bytes.
std::string WritePatternFile(const std::string& path, int mul) {
  std::string bytes(size_t{9} << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((i * mul + i / 4096) & 0xff);
  std::ofstream(path, std::ios::binary) << bytes;
  return bytes;
}

// --hugepages: the file's 2 MiB-aligned interior is replaced in place by
// anonymous memory with the same bytes, so pointers taken before stay valid
// and read the same weights; only the unaligned head and tail stay mapped
// from the file.
TEST(ResidencyTest, HugePagesKeepEveryAddressAndByte) {
  const std::string path = ::testing::TempDir() + "/residency_huge_test.safetensors";
  const std::string bytes = WritePatternFile(path, 7);
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  const uint8_t* data = (*mapped)->data();
  const auto file_bytes = [] { return MappedFileBytes("residency_huge_test.safetensors"); };
  EXPECT_EQ(file_bytes(), int64_t{9} << 20);
  const std::string line = launch::MoveCheckpointsToHugePages();
  ASSERT_EQ((*mapped)->data(), data);
  EXPECT_EQ(std::memcmp(data, bytes.data(), bytes.size()), 0);
  const std::string mode =
      launch::ThpMode(ReadPseudoFile("/sys/kernel/mm/transparent_hugepage/enabled"));
  if (mode == "never" || mode.empty()) {
    EXPECT_NE(line.find("stay in the page cache"), std::string::npos) << line;
  } else {
    EXPECT_NE(line.find("hugepages: "), std::string::npos) << line;
    // 9 MiB from a page-aligned start: at least 3 aligned 2 MiB pages moved.
    EXPECT_LE(file_bytes(), int64_t{3} << 20) << line;
  }
  mapped->reset();  // unmaps the moved pages and the file's head and tail
  std::filesystem::remove(path);
}

// The move leaves the whole huge pages inside kept ranges (tensors the model
// copied into its own layouts) as they are; touching or overlapping ranges
// count as one, and a range without a whole huge page inside keeps nothing.
TEST(ResidencyTest, MovedPiecesSkipTheKeptHugePages) {
  constexpr uintptr_t kM = uintptr_t{1} << 20;
  using Ranges = std::vector<launch::AddressRange>;
  EXPECT_EQ(launch::MovedPieces(0, 16 * kM, {}), (Ranges{{0, 16 * kM}}));
  EXPECT_EQ(launch::MovedPieces(0, 16 * kM, {{3 * kM, 9 * kM + 5}}),
            (Ranges{{0, 4 * kM}, {8 * kM, 16 * kM}}));
  // [1, 4 + e) and [4 + e, 7) merge into [1, 7): huge pages [2, 6) stay.
  EXPECT_EQ(launch::MovedPieces(0, 16 * kM, {{4 * kM + 1, 7 * kM}, {kM, 4 * kM + 1}}),
            (Ranges{{0, 2 * kM}, {6 * kM, 16 * kM}}));
  EXPECT_EQ(launch::MovedPieces(0, 16 * kM, {{3 * kM, 4 * kM + 7}}), (Ranges{{0, 16 * kM}}));
  // Ranges reaching past the region, or covering it.
  EXPECT_EQ(launch::MovedPieces(4 * kM, 8 * kM, {{0, 6 * kM}, {20 * kM, 30 * kM}}),
            (Ranges{{6 * kM, 8 * kM}}));
  EXPECT_EQ(launch::MovedPieces(4 * kM, 8 * kM, {{0, 30 * kM}}), Ranges{});
}

// A kept range stays file pages through the move while the rest moves,
// every byte still there (skipped where THP is off: nothing moves then).
TEST(ResidencyTest, HugePagesLeaveKeptRangesInThePageCache) {
  const std::string path = ::testing::TempDir() + "/residency_keep_test.safetensors";
  const std::string bytes = WritePatternFile(path, 5);
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  const uint8_t* data = (*mapped)->data();
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const std::string mode =
      launch::ThpMode(ReadPseudoFile("/sys/kernel/mm/transparent_hugepage/enabled"));
  if (mode == "never" || mode.empty()) {
    mapped->reset();
    std::filesystem::remove(path);
    GTEST_SKIP() << "transparent huge pages are off: the move is a no-op";
  }
  // The first 4 MiB kept: the whole huge pages inside them stay file pages
  // (at least one, from any page-aligned start), whole huge pages of the
  // other 5 MiB move (at least one).
  const uintptr_t kept_end = begin + (4 << 20);
  const std::string line = launch::MoveCheckpointsToHugePages({{begin, kept_end}});
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t huge_begin = (begin + kHuge - 1) & ~(kHuge - 1),
                  huge_end = kept_end & ~(kHuge - 1);
  ASSERT_LT(huge_begin, huge_end);
  int64_t kept_file_bytes = 0;
  for (const launch::MappedRegion& r :
       launch::CheckpointRegions(ReadPseudoFile("/proc/self/maps"))) {
    if (std::filesystem::path(r.path).filename() != "residency_keep_test.safetensors") continue;
    const uintptr_t b = std::max(r.begin, huge_begin), e = std::min(r.end, huge_end);
    if (b < e) kept_file_bytes += static_cast<int64_t>(e - b);
  }
  EXPECT_EQ(kept_file_bytes, static_cast<int64_t>(huge_end - huge_begin)) << line;
  EXPECT_LE(MappedFileBytes("residency_keep_test.safetensors"), int64_t{7} << 20) << line;
  EXPECT_EQ(std::memcmp(data, bytes.data(), bytes.size()), 0);
  mapped->reset();
  std::filesystem::remove(path);
}

// Populate and mlock pieces: page-sized blocks inside the skipped ranges
// stay out, partly covered pages stay in.
TEST(ResidencyTest, PiecesOutsideKeepPartlySkippedBlocks) {
  constexpr uintptr_t kP = 4096;
  using Ranges = std::vector<launch::AddressRange>;
  EXPECT_EQ(launch::PiecesOutside(0, 16 * kP, {{3 * kP + 1, 9 * kP}}, kP),
            (Ranges{{0, 4 * kP}, {9 * kP, 16 * kP}}));
  EXPECT_EQ(launch::PiecesOutside(0, 16 * kP, {{kP, 2 * kP}, {2 * kP, 5 * kP - 1}}, kP),
            (Ranges{{0, kP}, {4 * kP, 16 * kP}}));
  EXPECT_EQ(launch::PiecesOutside(0, 16 * kP, {{0, 16 * kP}}, kP), Ranges{});
}

// A 9 MiB pattern checkpoint file in TempDir, mapped, none of its pages
// resident in this process (as a dropped tensor's are); removed at the end.
struct DroppedFile {
  std::string name, path, bytes;
  std::unique_ptr<MappedFile> mapped;
  uintptr_t begin = 0;

  DroppedFile(std::string file_name, int mul)
      : name(std::move(file_name)), path(::testing::TempDir() + "/" + name) {
    bytes = WritePatternFile(path, mul);
    auto m = MappedFile::Open(path);
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) return;
    mapped = std::move(*m);
    begin = reinterpret_cast<uintptr_t>(mapped->data());
    EXPECT_EQ(::madvise(const_cast<uint8_t*>(mapped->data()), bytes.size(), MADV_DONTNEED), 0);
  }
  ~DroppedFile() {
    mapped.reset();
    std::filesystem::remove(path);
  }
};

// The tensors the model copied into its own layouts (dropped from the
// resident set) stay out of --populate: reading them back would hold them
// twice.  A mapped 9 MiB checkpoint file, its middle 4 MiB dropped and
// skipped: after populate the rest is resident, the middle is not.  (A read
// fault may map the whole large folio around the page, up to 2 MiB of file
// on Linux 6.x, so the ranges here are 2 MiB aligned, as the mapping is.)
TEST(ResidencyTest, PopulateLeavesTheSkippedRangesOut) {
  DroppedFile f("residency_skip_test.safetensors", 3);
  ASSERT_NE(f.mapped, nullptr);
  constexpr int64_t kMiB = int64_t{1} << 20;
  const launch::AddressRange middle{f.begin + 2 * kMiB, f.begin + 6 * kMiB};
  auto line = PopulateCheckpointMappings({middle});
  ASSERT_TRUE(line.ok()) << line.status().message();
  EXPECT_NE(line->find("4.0 MiB the model copied into its own layouts left out"), std::string::npos)
      << *line;
  EXPECT_EQ(ResidentFileBytes(f.name), int64_t{5} << 20) << *line;
  // Without the skip, everything comes in.
  line = PopulateCheckpointMappings();
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(ResidentFileBytes(f.name), int64_t{9} << 20);
  EXPECT_EQ(std::memcmp(f.mapped->data(), f.bytes.data(), f.bytes.size()), 0);
}

// --mlock locks what populate reads, not the skipped ranges (with plain
// MCL_CURRENT it would fault them in and pin them).  Skipped where the
// locked-memory limit refuses a test process.
TEST(ResidencyTest, MlockLeavesTheSkippedRangesOut) {
  DroppedFile f("residency_mlock_test.safetensors", 9);
  ASSERT_NE(f.mapped, nullptr);
  const launch::AddressRange head{f.begin, f.begin + (int64_t{4} << 20)};  // 2 MiB aligned
  auto line = launch::LockAllMemory({head});
  if (!line.ok()) GTEST_SKIP() << line.status().message();
  EXPECT_EQ(ResidentFileBytes(f.name), int64_t{5} << 20) << *line;
  ::munlockall();
}

TEST(ResidencyTest, MlockRefusalNamesTheLimit) {
  EXPECT_EQ(MlockError(ENOMEM, int64_t{8} << 20, int64_t{3} << 30),
            "--mlock: mlockall failed (Cannot allocate memory): the locked-memory limit "
            "RLIMIT_MEMLOCK is 8.0 MiB and the process maps 3.0 GiB; raise it (ulimit -l "
            "unlimited, systemd LimitMEMLOCK=infinity, docker --ulimit memlock=-1) or run "
            "without --mlock");
  EXPECT_NE(MlockError(EPERM, -1, 0).find("RLIMIT_MEMLOCK is unlimited"), std::string::npos);
}

// --numa node:N moves --cpu-list auto's threads to node N: one CPU per
// physical core of that node (a two-socket SMT host: cpus 0-3 on node 0,
// 4-7 on node 1, siblings 0/2, 1/3, 4/6, 5/7).
TEST(ResidencyTest, NodeCpuListIsOneCpuPerCoreOfThatNode) {
  std::vector<CpuPlace> places;
  for (int cpu = 0; cpu < 8; ++cpu) {
    places.push_back({cpu, cpu % 2, cpu / 4, cpu / 4});
  }
  EXPECT_EQ(NodeCpuList(places, 0), "0,1");
  EXPECT_EQ(NodeCpuList(places, 1), "4,5");
  EXPECT_EQ(NodeCpuList(places, 2), "");
  // On this host (one node) PlaceMemory leaves --cpu-list alone.
  launch::EngineOptions options;
  options.cpu_list = "auto";
  ResidencyFlags flags;
  flags.numa = "node:0";
  ASSERT_TRUE(PlaceMemory(flags, &options).ok());
  EXPECT_EQ(options.numa, "node:0");
  if (numa_available() < 0 || numa_num_configured_nodes() == 1) {
    EXPECT_EQ(options.cpu_list, "auto");
  }
  flags.numa = "sideways";
  EXPECT_EQ(PlaceMemory(flags, &options).code(), StatusCode::kInvalidArgument);
}

// --ep > 1: the CLI only records the choice; every rank applies it itself
// (a missing node is refused there, through the start-up agreement), so
// --cpu-list goes to the ranks unresolved.
TEST(ResidencyTest, ExpertParallelRanksPlaceThemselves) {
  launch::EngineOptions options;
  options.cpu_list = "auto";
  options.ep = 2;
  ResidencyFlags flags;
  flags.numa = "auto";
  ASSERT_TRUE(PlaceMemory(flags, &options).ok());
  EXPECT_EQ(options.numa, "auto");
  EXPECT_EQ(options.cpu_list, "auto");
  flags.numa = "node:9";
  EXPECT_TRUE(PlaceMemory(flags, &options).ok());
  EXPECT_EQ(options.numa, "node:9");
}

}  // namespace
}  // namespace dsv4::cli
