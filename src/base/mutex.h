// A mutex, its scoped lock and a condition variable that Clang's
// thread-safety analysis understands.  libstdc++'s std::mutex carries no
// capability attributes, so members annotated GUARDED_BY(a std::mutex) are
// not checked; these thin wrappers over the std types are.  Same cost as the
// std types (everything inline).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread_annotations.h"

namespace dsv4 {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the lock (where it cannot see it,
  // e.g. in a callback run under the lock).  Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable used with Mutex.  Wait* take the held mutex, release
// it while blocked and hold it again on return, as std::condition_variable.
class CondVar {
 public:
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's scope owns it
  }
  // Waits until pred() (evaluated with mu held) is true.  The analysis checks
  // a lambda as a function of its own: write it `[&]() REQUIRES(mu_) {...}`.
  // The analysis cannot tell that the caller's `mu_` named in the lambda is
  // `mu` here, so these bodies are not analysed; they call pred() only with
  // mu held, and callers are still checked to hold it (REQUIRES).
  template <typename Pred>
  void Wait(Mutex* mu, Pred pred) REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) Wait(mu);
  }
  // Returns false on timeout.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  // Waits until pred() or the deadline; returns pred().
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline, Pred pred)
      REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {  // as Wait(mu, pred)
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    while (!pred()) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        const bool done = pred();
        lock.release();
        return done;
      }
    }
    lock.release();
    return true;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace dsv4
