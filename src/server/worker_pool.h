// The threads that run blocking request handlers (a generation waits on the
// engine for its whole lifetime).  Threads start on demand, when a task finds
// none idle, up to a fixed maximum; beyond it tasks wait in FIFO order.  A
// thread the OS refuses is logged and the task waits for a running one, so a
// burst never aborts the process.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4::server {

class WorkerPool {
 public:
  explicit WorkerPool(int max_threads);
  ~WorkerPool();  // Shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False after Shutdown (the task is dropped).
  bool Submit(std::function<void()> task);
  // Runs what is queued, then joins every thread.  Idempotent.
  void Shutdown();
  int num_threads();

 private:
  void Loop();

  const int max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
  int idle_ = 0;                             // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
};

}  // namespace dsv4::server
