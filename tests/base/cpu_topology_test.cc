// CPU lists and the default placement of compute threads, over fake sysfs
// trees shaped like real hosts (SMT pairs, two sockets, two NUMA nodes).
#include "base/cpu_topology.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// Writes cpuN/topology/{core_id,physical_package_id} and a cpuN/nodeM entry.
struct FakeSys {
  fs::path root = fs::temp_directory_path() / ("dsv4_fake_sys_" + std::to_string(::getpid()));
  FakeSys() { fs::remove_all(root); }
  ~FakeSys() { fs::remove_all(root); }
  void Cpu(int cpu, int core, int package, int node) {
    const fs::path dir = root / ("cpu" + std::to_string(cpu));
    fs::create_directories(dir / "topology");
    fs::create_directories(dir / ("node" + std::to_string(node)));
    std::ofstream(dir / "topology/core_id") << core << "\n";
    std::ofstream(dir / "topology/physical_package_id") << package << "\n";
  }
};

TEST(CpuTopologyTest, OneThreadPerPhysicalCoreOfTheFirstNode) {
  FakeSys sys;
  // Two sockets = two nodes, 4 cores each, SMT siblings numbered +8.
  for (int cpu = 0; cpu < 16; ++cpu) {
    const int package = (cpu % 8) / 4;
    sys.Cpu(cpu, cpu % 4, package, package);
  }
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[size_t(i)] = i;
  auto places = ReadCpuPlaces(sys.root.string(), all);
  ASSERT_TRUE(places.ok()) << places.status().ToString();
  EXPECT_EQ(OneNodeCoreCpus(*places), (std::vector<int>{0, 1, 2, 3}));
  // A mask that starts on the second socket stays there.
  places = ReadCpuPlaces(sys.root.string(), {4, 5, 12, 13, 0});
  ASSERT_TRUE(places.ok());
  EXPECT_EQ(OneNodeCoreCpus(*places), (std::vector<int>{4, 5}));
  // Only SMT siblings allowed: one thread per core they belong to.
  places = ReadCpuPlaces(sys.root.string(), {9, 10, 11});
  ASSERT_TRUE(places.ok());
  EXPECT_EQ(OneNodeCoreCpus(*places), (std::vector<int>{9, 10, 11}));
}

TEST(CpuTopologyTest, UnreadableTopologyNamesTheFile) {
  FakeSys sys;
  sys.Cpu(0, 0, 0, 0);
  auto places = ReadCpuPlaces(sys.root.string(), {0, 1});
  ASSERT_FALSE(places.ok());
  EXPECT_NE(places.status().message().find("cpu1/topology/core_id"), std::string::npos)
      << places.status().ToString();
}

TEST(CpuTopologyTest, TheRealHostHasAtLeastOneCoreInTheDefault) {
  const std::vector<int> cpus = AffinityCpus();
  ASSERT_FALSE(cpus.empty());
  auto places = ReadCpuPlaces(kSysCpuRoot, cpus);
  if (!places.ok()) GTEST_SKIP() << "no sysfs topology here: " << places.status().ToString();
  const std::vector<int> one = OneNodeCoreCpus(*places);
  EXPECT_GE(one.size(), 1u);
  EXPECT_LE(one.size(), cpus.size());
}

TEST(CpuTopologyTest, ParsesKernelCpuLists) {
  EXPECT_EQ(*ParseCpuList("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*ParseCpuList("5"), (std::vector<int>{5}));
  for (const char* bad : {"", ",", "1,", "3-1", "1,1", "0-2,2", "a", "-1", "1-", "70000", "1 ,2"}) {
    EXPECT_FALSE(ParseCpuList(bad).ok()) << "'" << bad << "'";
  }
}

TEST(CpuTopologyTest, ChoosesWhereToPin) {
  // 2 sockets x 2 cores, SMT siblings +4: node 0 = CPUs 0, 1, 4, 5.
  std::vector<CpuPlace> places;
  for (int cpu = 0; cpu < 8; ++cpu) places.push_back({cpu, cpu % 2, (cpu % 4) / 2, (cpu % 4) / 2});
  const std::vector<int> allowed = {0, 1, 2, 3, 4, 5, 6, 7};
  int threads = 0;
  EXPECT_EQ(*ChoosePinning(&threads, "auto", allowed, &places), (std::vector<int>{0, 1}));
  EXPECT_EQ(threads, 2);
  threads = 3;  // an explicit count is not pinned by auto
  EXPECT_TRUE(ChoosePinning(&threads, "auto", allowed, &places)->empty());
  threads = 0;  // nor is anything without topology
  EXPECT_TRUE(ChoosePinning(&threads, "auto", allowed, nullptr)->empty());
  EXPECT_EQ(threads, 0);
  EXPECT_TRUE(ChoosePinning(&threads, "none", allowed, &places)->empty());
  EXPECT_TRUE(ChoosePinning(&threads, "", allowed, &places)->empty());
  EXPECT_EQ(*ChoosePinning(&threads, "2-3,6", allowed, &places), (std::vector<int>{2, 3, 6}));
  EXPECT_EQ(threads, 3);
  EXPECT_EQ(*ChoosePinning(&threads, "5,1,0", allowed, &places), (std::vector<int>{5, 1, 0}));
  threads = 2;
  Result<std::vector<int>> r = ChoosePinning(&threads, "0-2", allowed, &places);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--cpu-list names 3 CPUs for --threads 2; give one CPU per thread");
  threads = 0;
  r = ChoosePinning(&threads, "0,9", allowed, &places);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--cpu-list: CPU 9 is not available to this process (8 CPUs are)");
  r = ChoosePinning(&threads, "3-1", allowed, &places);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("--cpu-list: ", 0), 0u) << r.status().message();
}

// A pinned pool runs share i on cpus[i], the caller's share included.
TEST(CpuTopologyTest, PinnedPoolRunsEachShareOnItsCpu) {
  const std::vector<int> allowed = AffinityCpus();
  ASSERT_FALSE(allowed.empty());
  const int n = std::min<int>(3, static_cast<int>(allowed.size()));
  std::vector<int> cpus(allowed.rbegin(), allowed.rbegin() + n);  // highest first
  std::thread caller([&] {
    ThreadPool pool(n);
    ASSERT_TRUE(pool.PinTo(cpus).ok());
    if (n > 1) {
      EXPECT_FALSE(pool.PinTo({cpus[0]}).ok());  // one CPU per thread
    }
    std::vector<int> ran(static_cast<size_t>(n), -1);
    for (int round = 0; round < 3; ++round) {
      pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ran[static_cast<size_t>(i)] = sched_getcpu();
      });
      EXPECT_EQ(ran, cpus) << "round " << round;
    }
  });
  caller.join();
}

}  // namespace
}  // namespace dsv4
