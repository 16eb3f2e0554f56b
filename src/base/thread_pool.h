// A persistent pool of compute threads (architecture decision 5).
//
// ParallelFor splits [0, n) into contiguous, statically assigned ranges, one
// per thread, so which thread computes which output never depends on timing.
// Kernels keep a fixed reduction order per output element, which makes their
// results bitwise independent of the thread count (batch invariance).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "base/function_ref.h"
#include "base/mutex.h"
#include "base/status.h"

namespace dsv4 {

// The most compute threads a pool (and every --threads flag) accepts: more
// than any host's CPUs today, and far below where thread creation fails
// (std::thread throws and an unhandled throw aborts the process).
inline constexpr int kMaxThreads = 1024;

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread, which always takes part.
  // Aborts if the OS refuses a thread: code that takes the count from a user
  // uses Create.
  explicit ThreadPool(int num_threads);
  // As the constructor, but InvalidArgument outside [1, kMaxThreads] and
  // ResourceExhausted (one line, the workers started so far joined) when the
  // OS refuses a thread.
  static Result<std::unique_ptr<ThreadPool>> Create(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Non-owning (base/function_ref.h): a dispatch allocates nothing.
  using RangeFn = FunctionRef<void(int64_t begin, int64_t end)>;

  // Runs fn over [0, n) split into at most num_threads() contiguous ranges of
  // at least min_grain items.  Blocks until all ranges are done.
  // REQUIRES: not called concurrently from two threads, nor from inside fn.
  void ParallelFor(int64_t n, int64_t min_grain, const RangeFn& fn);

  // Runs fn over [0, n) in contiguous chunks that the calling thread and the
  // workers claim as they become free (guided: each claim takes
  // max(chunk, remaining / (2·num_threads())) items rounded up to a multiple
  // of chunk, or what is left), so a preempted or
  // late-waking worker delays the call by at most one small chunk instead of
  // a whole static share.  Which thread runs a chunk depends on
  // timing: use it only where fn's results depend on the items alone, never on
  // the range boundaries.  With one thread, or n <= chunk, fn runs once over
  // [0, n) on the caller.  Blocks until every chunk is done.
  // REQUIRES: as ParallelFor; n < 2^32.
  void ParallelForDynamic(int64_t n, int64_t chunk, const RangeFn& fn);

  // As ParallelForDynamic, but claimed from both ends of [0, n): the calling
  // thread and the workers of even index take the front's next chunk,
  // workers of odd index the back's (each claim still guided, a share of
  // what lies between the two ends), so with two threads each starts on
  // its own end and they meet wherever the host lets them.  For tasks
  // whose neighbours share data (a GEMM's row blocks): each thread keeps to
  // its own (docs/performance.md "Claims from both ends").  Positions are
  // kept in units of a multiple of chunk, at most 2^16 - 1 units, so a very
  // long range claims in larger steps.  REQUIRES: as ParallelFor.
  void ParallelForDynamicBothEnds(int64_t n, int64_t chunk, const RangeFn& fn);

  // Pins worker i to cpus[i] now and the calling thread (index 0) to cpus[0]
  // at its first ParallelFor from each thread that calls.  cpus.size() ==
  // num_threads().  Scheduling only: results never depend on placement.
  Status PinTo(const std::vector<int>& cpus);

  // Default thread count: the physical cores of one NUMA node among the CPUs
  // this process may run on (base/cpu_topology.h).
  static int DefaultThreads();

 private:
  struct NoStart {};
  ThreadPool(int num_threads, NoStart) : num_threads_(std::max(1, num_threads)) {}
  void StopWorkers() EXCLUDES(mu_);
  void WorkerLoop(int index) EXCLUDES(mu_);
  // Runs part `index` of `parts` of a static job over [0, n).  Takes the job
  // as arguments (copied under mu_ by workers) rather than reading the
  // members, which only mu_ guards.
  static void RunShare(const RangeFn& fn, int64_t n, int parts, int index);
  // Publishes and runs a dynamic job (from the front only, or both ends).
  void RunDynamic(int64_t n, int64_t chunk, const RangeFn& fn, bool both_ends) EXCLUDES(mu_);
  // Claims and runs chunks of the dynamic job tagged `tag` until none is left.
  void RunChunks(uint32_t tag, const RangeFn* fn, int64_t n, int64_t chunk);
  // The same for a job claimed from both ends in units of `unit` items,
  // from the back when `from_back`.
  void RunChunksBothEnds(uint32_t tag, const RangeFn* fn, int64_t n, int64_t unit, bool from_back);

  // Pins the calling thread to caller_cpu_ once (see PinTo).
  void PinCaller();

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::atomic<int> caller_cpu_{-1};  // set once by PinTo, before the pool is shared

  // The published job (a new one is announced by bumping generation_).
  Mutex mu_;
  CondVar wake_;
  const RangeFn* job_ GUARDED_BY(mu_) = nullptr;
  int64_t job_n_ GUARDED_BY(mu_) = 0;
  int job_parts_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  bool dynamic_ GUARDED_BY(mu_) = false;    // the published job is a ParallelForDynamic
  int64_t chunk_ GUARDED_BY(mu_) = 0;       // for both ends: the claim unit
  bool both_ends_ GUARDED_BY(mu_) = false;  // ... claimed from both ends
  // Written under mu_ (so a waiting worker cannot miss a bump), read without
  // it by spinning workers.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  // Dynamic jobs: (job tag << 32) | next unclaimed item, or for jobs claimed
  // from both ends (job tag << 32) | (front unit << 16) | back unit.  A claim
  // is a CAS on the whole word, so a worker holding a finished job's tag
  // claims nothing.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_items_{0};  // items of the current dynamic job finished
};

// Profiling hook (src/profile installs one while its kernel level records):
// called on the thread that runs a share of a ParallelFor or its part of a
// ParallelForDynamic, with begin = true before and false after; worker 0 is
// the calling thread.  Read with one relaxed load per share, so an unset
// hook costs nothing measurable.  base cannot depend on the profiler, hence
// a function pointer.
using PoolShareObserver = void (*)(int worker, bool begin);
void SetPoolShareObserver(PoolShareObserver observer);

// Starts `n` threads that wait for each other, then joins them: a pre-flight
// check of a thread count a user asked for (dsv4 serve --http-threads,
// before the banner: the server's worker pool only logs a refused thread
// later).  ResourceExhausted naming the count when the OS refuses one.  Racy
// by nature (the limit is shared), but it turns the usual cause, a count
// above the process or cgroup thread limit, into one clear line at start-up.
Status CheckThreadsCanStart(int n);

// Runs fn over [0, n) on pool if non-null, else inline on the caller.
inline void ParallelFor(ThreadPool* pool, int64_t n, int64_t min_grain,
                        const ThreadPool::RangeFn& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->num_threads() == 1 || n < 2 * min_grain) {
    fn(0, n);
    return;
  }
  pool->ParallelFor(n, min_grain, fn);
}

}  // namespace dsv4
