// The single-process communicator (what every run without mpirun uses):
// rank 0 of 1, collectives copy or do nothing, bad arguments are errors.
#include <gtest/gtest.h>

#include <vector>

#include "dist/communicator.h"
#include "dist/session.h"

namespace dsv4::dist {
namespace {

TEST(LocalCommunicatorTest, CollectivesOfOneRank) {
  LocalCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  int64_t x = 7;
  EXPECT_TRUE(c.Broadcast(&x, 8, 0).ok());
  EXPECT_TRUE(c.BroadcastIdle(&x, 8, 0, 0).ok());
  EXPECT_FALSE(c.BroadcastIdle(&x, 8, 0, -1).ok());
  EXPECT_EQ(x, 7);
  const std::vector<uint8_t> send = {1, 2, 3};
  std::vector<uint8_t> recv(3);
  const std::vector<int64_t> counts = {3};
  ASSERT_TRUE(c.AllGatherV(send.data(), recv.data(), counts).ok());
  EXPECT_EQ(recv, send);
  recv.assign(3, 0);
  ASSERT_TRUE(c.AllToAllV(send.data(), counts, recv.data(), counts).ok());
  EXPECT_EQ(recv, send);
  recv.assign(3, 0);
  ASSERT_TRUE(c.AllGather(send.data(), 3, recv.data()).ok());
  EXPECT_EQ(recv, send);
  EXPECT_TRUE(c.Barrier().ok());
}

TEST(LocalCommunicatorTest, BadArgumentsAreErrors) {
  LocalCommunicator c;
  int64_t x = 0;
  EXPECT_FALSE(c.Broadcast(&x, 8, 1).ok());
  EXPECT_FALSE(c.Broadcast(&x, -1, 0).ok());
  const std::vector<int64_t> two = {1, 1};
  EXPECT_FALSE(c.AllGatherV(&x, &x, two).ok());
  const std::vector<int64_t> one = {1}, other = {2};
  EXPECT_FALSE(c.AllToAllV(&x, one, &x, other).ok());
  const std::vector<int64_t> huge = {int64_t{1} << 40};
  EXPECT_FALSE(c.AllGatherV(&x, &x, huge).ok());
}

TEST(LocalCommunicatorTest, WorldIsOneLocalRankWithoutASession) {
  EXPECT_EQ(World().size(), 1);
  EXPECT_EQ(World().rank(), 0);
}

TEST(LocalCommunicatorTest, SessionOutsideMpirunIsLocalAndFinishes) {
  if (StartedByMpirun()) GTEST_SKIP() << "run under mpirun";
  int argc = 0;
  char** argv = nullptr;
  auto s = Session::Start(&argc, &argv);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(&World(), &(*s)->world());
  EXPECT_EQ(World().size(), 1);
  EXPECT_FALSE(Session::Start(&argc, &argv).ok());  // one per process
  s->reset();
  EXPECT_EQ(World().size(), 1);
}

}  // namespace
}  // namespace dsv4::dist
