#include "server/worker_pool.h"

#include <system_error>

#include "base/logging.h"

namespace dsv4::server {

WorkerPool::WorkerPool(int max_threads) : max_threads_(max_threads < 1 ? 1 : max_threads) {}

WorkerPool::~WorkerPool() { Shutdown(); }

bool WorkerPool::Submit(std::function<void()> task) {
  MutexLock lock(&mu_);
  if (stop_) return false;
  tasks_.push_back(std::move(task));
  // Tasks beyond the idle threads start a thread each, up to the maximum.
  if (static_cast<int>(tasks_.size()) > idle_ && static_cast<int>(threads_.size()) < max_threads_) {
    try {
      threads_.emplace_back([this] { Loop(); });
    } catch (const std::system_error& e) {
      DSV4_LOG_WARN(
          "server: cannot start HTTP worker thread {} ({}); the request waits for a "
          "running one",
          threads_.size() + 1, e.what());
    }
  }
  cv_.Signal();
  return true;
}

void WorkerPool::Loop() {
  mu_.Lock();
  for (;;) {
    ++idle_;
    cv_.Wait(&mu_, [this]() REQUIRES(mu_) { return stop_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) break;  // stopping and nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    mu_.Unlock();
    task();
    task = nullptr;  // release what it captured before waiting again
    mu_.Lock();
  }
  mu_.Unlock();
}

void WorkerPool::Shutdown() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.SignalAll();
  for (std::thread& t : threads) t.join();
  // Without any thread (all refused) queued tasks are dropped here.
  std::deque<std::function<void()>> left;
  {
    MutexLock lock(&mu_);
    left.swap(tasks_);
  }
}

int WorkerPool::num_threads() {
  MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

}  // namespace dsv4::server
