// Compiled (never linked) by thread_safety_check.cmake with the project's
// Clang flags: DSV4_CASE 0 follows every locking rule and must compile;
// every other case breaks one rule and must be rejected by -Wthread-safety
// (docs/architecture.md "Rules held by tools").
#include "base/mutex.h"

#ifndef DSV4_CASE
#error "DSV4_CASE must be defined"
#endif

namespace dsv4 {
namespace {

class Queue {
 public:
  void Push(int v) EXCLUDES(mu_) {
#if DSV4_CASE == 2  // write without the lock
    items_ = v;
#else
    MutexLock lock(&mu_);
    items_ = v;
#endif
    cv_.Signal();
  }

  int Size() const EXCLUDES(mu_) {
#if DSV4_CASE == 1  // read without the lock
    return items_;
#else
    MutexLock lock(&mu_);
    return items_;
#endif
  }

  void Clear() EXCLUDES(mu_) {
#if DSV4_CASE == 3  // a REQUIRES function called without the lock
    ClearLocked();
#elif DSV4_CASE == 4  // an EXCLUDES function called with the lock held
    MutexLock lock(&mu_);
    Push(0);
#else
    MutexLock lock(&mu_);
    ClearLocked();
#endif
  }

  void WaitNonEmpty() EXCLUDES(mu_) {
#if DSV4_CASE == 5  // waiting on the condition variable without the lock
    cv_.Wait(&mu_);
#elif DSV4_CASE == 6  // the lock is still held when the function returns
    mu_.Lock();
    while (items_ == 0) cv_.Wait(&mu_);
#else
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [this]() REQUIRES(mu_) { return items_ != 0; });
#endif
  }

 private:
  void ClearLocked() REQUIRES(mu_) { items_ = 0; }

  mutable Mutex mu_;
  CondVar cv_;
  int items_ GUARDED_BY(mu_) = 0;
};

}  // namespace

// Keeps every member used, so nothing is skipped as unused.
int UseQueue() {
  Queue q;
  q.Push(1);
  q.Clear();
  q.WaitNonEmpty();
  return q.Size();
}

}  // namespace dsv4
