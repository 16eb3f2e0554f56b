// The threads that run blocking request handlers (a generation waits on the
// engine for its whole lifetime).  Threads start on demand, when a task finds
// none idle, up to a fixed maximum; beyond it tasks wait in FIFO order.  A
// thread the OS refuses is logged and the task waits for a running one, so a
// burst never aborts the process.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace dsv4::server {

class WorkerPool {
 public:
  explicit WorkerPool(int max_threads);
  ~WorkerPool();  // Shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // False after Shutdown (the task is dropped).
  bool Submit(std::function<void()> task) EXCLUDES(mu_);
  // Runs what is queued, then joins every thread.  Idempotent.
  void Shutdown() EXCLUDES(mu_);
  int num_threads() EXCLUDES(mu_);

 private:
  void Loop() EXCLUDES(mu_);

  const int max_threads_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
  int idle_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
};

}  // namespace dsv4::server
