// CPU lists and the default placement of compute threads, over fake sysfs
// trees shaped like real hosts (SMT pairs, two sockets, two NUMA nodes).
#include "base/cpu_topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace dsv4
