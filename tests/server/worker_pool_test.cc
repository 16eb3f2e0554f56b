#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace dsv4::server {
namespace {

TEST(WorkerPool, GrowsOnDemandUpToItsMaximumAndRunsEverything) {
  WorkerPool pool(3);
  EXPECT_EQ(pool.num_threads(), 0);  // nothing started before the first task
  std::mutex mu;
  std::condition_variable cv;
  int running = 0, most = 0;
  bool release = false;
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(pool.Submit([&] {
      std::unique_lock<std::mutex> lock(mu);
      most = std::max(most, ++running);
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
      --running;
      ++done;
    }));
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return running == 3; }));
    release = true;
    cv.notify_all();
  }
  pool.Shutdown();  // runs what is queued, then joins
  EXPECT_EQ(done.load(), 10);
  EXPECT_EQ(most, 3);
  EXPECT_FALSE(pool.Submit([] {}));
}

}  // namespace
}  // namespace dsv4::server
