#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <system_error>
#include <utility>

#include "base/cpu_topology.h"
#include "base/logging.h"

namespace dsv4 {
namespace {

std::atomic<PoolShareObserver> g_share_observer{nullptr};

// Reports one share to the observer installed when it began.
class ObservedShare {
 public:
  explicit ObservedShare(int worker)
      : fn_(g_share_observer.load(std::memory_order_relaxed)), worker_(worker) {
    if (fn_ != nullptr) fn_(worker_, true);
  }
  ~ObservedShare() {
    if (fn_ != nullptr) fn_(worker_, false);
  }
  ObservedShare(const ObservedShare&) = delete;
  ObservedShare& operator=(const ObservedShare&) = delete;

 private:
  const PoolShareObserver fn_;
  const int worker_;
};

}  // namespace

void SetPoolShareObserver(PoolShareObserver observer) {
  g_share_observer.store(observer, std::memory_order_relaxed);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

Result<std::unique_ptr<ThreadPool>> ThreadPool::Create(int num_threads) {
  if (num_threads < 1 || num_threads > kMaxThreads) {
    return InvalidArgument("{} threads requested; a pool takes 1 to {}", num_threads, kMaxThreads);
  }
  std::unique_ptr<ThreadPool> pool(new ThreadPool(num_threads, NoStart{}));
  for (int i = 1; i < num_threads; ++i) {
    try {
      pool->workers_.emplace_back([p = pool.get(), i] { p->WorkerLoop(i); });
    } catch (const std::system_error& e) {
      pool->StopWorkers();
      return ResourceExhausted("cannot start {} threads: the OS refused thread {} ({})",
                               num_threads, i + 1, e.what());
    }
  }
  return pool;
}

ThreadPool::~ThreadPool() { StopWorkers(); }

Status ThreadPool::PinTo(const std::vector<int>& cpus) {
  if (static_cast<int>(cpus.size()) != num_threads_) {
    return InvalidArgument("{} CPUs given to pin {} threads", cpus.size(), num_threads_);
  }
  for (int i = 1; i < num_threads_; ++i) {
    DSV4_RETURN_IF_ERROR(PinThread(workers_[size_t(i - 1)].native_handle(), cpus[size_t(i)]));
  }
  caller_cpu_.store(cpus[0], std::memory_order_relaxed);
  return Status::Ok();
}

void ThreadPool::PinCaller() {
  const int cpu = caller_cpu_.load(std::memory_order_relaxed);
  if (cpu < 0) return;
  // Keyed by pool and CPU: a later pool at the same address with another
  // CPU list pins again (one with the same CPU needs nothing).
  thread_local std::pair<const ThreadPool*, int> pinned{nullptr, -1};
  if (pinned == std::pair<const ThreadPool*, int>{this, cpu}) return;
  pinned = {this, cpu};
  if (const Status s = PinThread(pthread_self(), cpu); !s.ok()) {
    DSV4_LOG_WARN("thread pool: {}; the calling thread runs unpinned", s.message());
  }
}

Status CheckThreadsCanStart(int n) {
  Mutex mu;
  CondVar cv;
  bool release = false;  // guarded by mu (a local: the analysis checks only members)
  std::vector<std::thread> threads;
  Status result;
  for (int i = 0; i < n; ++i) {
    try {
      threads.emplace_back([&] {
        MutexLock lock(&mu);
        cv.Wait(&mu, [&] { return release; });
      });
    } catch (const std::system_error& e) {
      result = ResourceExhausted("cannot start {} threads: the OS refused thread {} ({})", n, i + 1,
                                 e.what());
      break;
    }
  }
  {
    MutexLock lock(&mu);
    release = true;
  }
  cv.SignalAll();
  for (std::thread& t : threads) t.join();
  return result;
}

void ThreadPool::StopWorkers() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.SignalAll();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

int ThreadPool::DefaultThreads() {
  // One thread per physical core of one NUMA node (cpu_topology.h): SMT
  // siblings share a core's vector units, and a second node's cores would
  // stream their weights across the interconnect.  Without readable topology,
  // every CPU of the affinity mask.
  const std::vector<int> cpus = AffinityCpus();
  if (cpus.empty()) return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const Result<std::vector<CpuPlace>> places = ReadCpuPlaces(kSysCpuRoot, cpus);
  if (!places.ok()) return static_cast<int>(cpus.size());
  return std::max(1, static_cast<int>(OneNodeCoreCpus(*places).size()));
}

void ThreadPool::RunShare(const RangeFn& fn, int64_t n, int parts, int index) {
  if (index >= parts) return;
  // Part p covers [n*p/parts, n*(p+1)/parts): fixed for given n and parts.
  const int64_t begin = n * index / parts;
  const int64_t end = n * (index + 1) / parts;
  if (begin < end) fn(begin, end);
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_grain, const RangeFn& fn) {
  if (n <= 0) return;
  PinCaller();
  const int64_t grain = std::max<int64_t>(1, min_grain);
  const int parts = static_cast<int>(std::min<int64_t>(num_threads_, (n + grain - 1) / grain));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  {
    MutexLock lock(&mu_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    dynamic_ = false;
    pending_.store(num_threads_ - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.SignalAll();
  {
    ObservedShare observed(0);
    RunShare(fn, n, parts, 0);
  }
  // Workers finish quickly for compute kernels; spin briefly, then yield.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::ParallelForDynamic(int64_t n, int64_t chunk, const RangeFn& fn) {
  RunDynamic(n, chunk, fn, false);
}

void ThreadPool::ParallelForDynamicBothEnds(int64_t n, int64_t chunk, const RangeFn& fn) {
  RunDynamic(n, chunk, fn, true);
}

void ThreadPool::RunDynamic(int64_t n, int64_t chunk, const RangeFn& fn, bool both_ends) {
  if (n <= 0) return;
  PinCaller();
  chunk = std::max<int64_t>(1, chunk);
  if (num_threads_ == 1 || n <= chunk) {
    fn(0, n);
    return;
  }
  // Both ends: positions in units of whole chunks, as few chunks per unit as
  // keep the unit count within 16 bits.
  constexpr int64_t kMaxUnits = 0xffff;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int64_t unit = both_ends ? chunk * ((chunks + kMaxUnits - 1) / kMaxUnits) : chunk;
  const auto units = static_cast<uint64_t>((n + unit - 1) / unit);
  uint32_t tag;
  {
    MutexLock lock(&mu_);
    job_ = &fn;
    job_n_ = n;
    chunk_ = unit;
    dynamic_ = true;
    both_ends_ = both_ends;
    done_items_.store(0, std::memory_order_relaxed);
    tag = static_cast<uint32_t>(generation_.load() + 1);
    claim_.store(static_cast<uint64_t>(tag) << 32 | (both_ends ? units : 0),
                 std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.SignalAll();
  {
    ObservedShare observed(0);
    if (both_ends) {
      RunChunksBothEnds(tag, &fn, n, unit, false);
    } else {
      RunChunks(tag, &fn, n, chunk);
    }
  }
  // Only chunks already claimed by a worker remain: at most one per worker.
  for (int spins = 0; done_items_.load(std::memory_order_acquire) != n; ++spins) {
    if (spins < 4096) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::RunChunks(uint32_t tag, const RangeFn* fn, int64_t n, int64_t chunk) {
  uint64_t state = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(state >> 32) != tag) return;  // a later job: ours is done
    const auto begin = static_cast<int64_t>(state & 0xffffffffu);
    if (begin >= n) return;
    // Guided: a share of what is left (large claims first, few CAS), never
    // under `chunk`, so the last claims are small and end together; whole
    // multiples of `chunk`, so claims start on its multiples (a GEMM's chunk
    // is an even count of panels, which its kernels walk in pairs).
    const int64_t share = (n - begin) / (2 * static_cast<int64_t>(num_threads_));
    const int64_t size = std::max<int64_t>(1, (share + chunk - 1) / chunk) * chunk;
    const int64_t end = std::min(n, begin + size);
    const uint64_t next = (static_cast<uint64_t>(tag) << 32) | static_cast<uint64_t>(end);
    if (claim_.compare_exchange_weak(state, next, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      (*fn)(begin, end);
      done_items_.fetch_add(end - begin, std::memory_order_acq_rel);
      state = claim_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::RunChunksBothEnds(uint32_t tag, const RangeFn* fn, int64_t n, int64_t unit,
                                   bool from_back) {
  uint64_t state = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(state >> 32) != tag) return;  // a later job: ours is done
    const auto front = static_cast<int64_t>((state >> 16) & 0xffff);
    const auto back = static_cast<int64_t>(state & 0xffff);
    if (front >= back) return;
    // Guided as RunChunks: a share of what lies between the ends.
    const int64_t take =
        std::max<int64_t>(1, (back - front) / (2 * static_cast<int64_t>(num_threads_)));
    const int64_t first = from_back ? back - take : front;
    const int64_t last = from_back ? back : front + take;
    const uint64_t next = (static_cast<uint64_t>(tag) << 32) |
                          static_cast<uint64_t>(from_back ? front : last) << 16 |
                          static_cast<uint64_t>(from_back ? first : back);
    if (claim_.compare_exchange_weak(state, next, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      const int64_t begin = first * unit, end = std::min(n, last * unit);
      (*fn)(begin, end);
      done_items_.fetch_add(end - begin, std::memory_order_acq_rel);
      state = claim_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little before sleeping: back-to-back kernels arrive within
    // microseconds during a forward pass.
    for (int spins = 0; spins < 2048 && generation_.load(std::memory_order_acquire) == seen;
         ++spins) {
      _mm_pause();
    }
    bool dynamic, both_ends;
    const RangeFn* fn;
    int64_t n, chunk;
    int parts;
    {
      MutexLock lock(&mu_);
      wake_.Wait(&mu_, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_) return;
      dynamic = dynamic_;
      both_ends = both_ends_;
      fn = job_;
      n = job_n_;
      chunk = chunk_;
      parts = job_parts_;
    }
    if (dynamic) {
      // Not counted in pending_: the caller waits for claimed chunks only, so
      // a worker that wakes after the job is done simply finds nothing left.
      ObservedShare observed(index);
      if (both_ends) {
        RunChunksBothEnds(static_cast<uint32_t>(seen), fn, n, chunk, index % 2 == 1);
      } else {
        RunChunks(static_cast<uint32_t>(seen), fn, n, chunk);
      }
    } else {
      if (index < parts) {
        ObservedShare observed(index);
        RunShare(*fn, n, parts, index);
      }
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

}  // namespace dsv4
