// The registry of thread rings, the flusher and session start/stop
// (profile/session.h).
#include "profile/recorder.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/file_util.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/thread_pool.h"
#include "profile/options.h"
#include "profile/session.h"
#include "profile/trace_writer.h"

namespace dsv4::profile {
namespace internal {
namespace {

// Kernel level: one "pool.share" span per share of a parallel job, on the
// thread that ran it (base/thread_pool.h PoolShareObserver); names the
// workers "pool-<index>" the first time they run one.
void ObservePoolShare(int worker, bool begin) {
  thread_local int64_t start = -1;
  thread_local bool named = false;
  if (begin) {
    start = Enabled(kKernel) ? NowNs() : -1;
    if (!named && worker > 0) {
      SetThreadName(Intern("pool-" + std::to_string(worker)));
      named = true;
    }
    return;
  }
  if (start < 0) return;
  Complete(kKernel, "pool", "pool.share", start, NowNs() - start, {{"worker", worker}});
  start = -1;
}

// A run of one thread's events in the spill file.
struct SpillHeader {
  int32_t tid = 0;
  int64_t count = 0;
};
static_assert(std::is_trivially_copyable_v<Event>, "events are spilled as raw bytes");

int64_t RoundUpPow2(int64_t n) {
  int64_t p = 64;
  while (p < n) p <<= 1;
  return p;
}

class Recorder {
 public:
  // Never destroyed: threads may record (and retire their rings) during
  // static destruction.
  static Recorder& Get() {
    static Recorder* r = new Recorder();
    return *r;
  }

  ThreadBuffer* Register(const char* name) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    buffers_.push_back(std::make_unique<ThreadBuffer>(next_tid_++, ring_events_));
    buffers_.back()->name.store(name, std::memory_order_relaxed);
    return buffers_.back().get();
  }

  Status Start(const SessionOptions& options) EXCLUDES(mu_);
  Result<SessionSummary> Stop() EXCLUDES(mu_);
  bool Active() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return writer_ != nullptr;
  }
  int Started() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return sessions_;
  }

 private:
  Recorder() = default;
  void FlushLoop(int interval_ms) EXCLUDES(mu_);
  void DrainLocked() REQUIRES(mu_);
  Status WriteSpilledLocked(TraceWriter* writer) REQUIRES(mu_);

  mutable Mutex mu_;
  CondVar wake_;  // stop_flusher_ set
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_ GUARDED_BY(mu_);
  int next_tid_ GUARDED_BY(mu_) = 1;
  int64_t ring_events_ GUARDED_BY(mu_) = SessionOptions().ring_events;
  // The running session (writer_ != nullptr).
  std::unique_ptr<TraceWriter> writer_ GUARDED_BY(mu_);
  uint32_t session_ GUARDED_BY(mu_) = 0;
  uint32_t levels_ GUARDED_BY(mu_) = 0;
  int sessions_ GUARDED_BY(mu_) = 0;
  int64_t dropped_ GUARDED_BY(mu_) = 0;
  int64_t stale_ GUARDED_BY(mu_) = 0;  // events of an earlier session found in a ring
  int64_t start_ns_ GUARDED_BY(mu_) = 0;
  std::map<int, const char*> threads_ GUARDED_BY(mu_);  // tids seen this session -> name
  bool stop_flusher_ GUARDED_BY(mu_) = false;
  // The session's events as the rings held them (raw, unlinked at once so a
  // crash leaves nothing behind); formatted into the JSON only at the stop,
  // so the flusher costs a memcpy per event, not a JSON format.
  std::FILE* spill_ GUARDED_BY(mu_) = nullptr;
  Status spill_error_ GUARDED_BY(mu_);
  std::thread flusher_;  // touched only by Start and Stop, which serialize on writer_
  Mutex control_mu_;     // serializes Start and Stop
};

Status Recorder::Start(const SessionOptions& options) {
  MutexLock control(&control_mu_);
  if ((options.levels & kLevelMask) == 0) {
    return InvalidArgument("profile session: no level to record");
  }
  {
    MutexLock lock(&mu_);
    if (writer_ != nullptr) return FailedPrecondition("a profile is already running");
  }
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<TraceWriter> writer, TraceWriter::Open(options.path));
  writer->WriteProcessName(::getpid(), "dsv4");
  const std::string spill_path = fmt::format("{}.spill.{}", options.path, ::getpid());
  std::FILE* spill = std::fopen(spill_path.c_str(), "w+b");
  if (spill == nullptr) {
    return IoError("profile output: cannot write {}: {}", spill_path, DescribeErrno(errno));
  }
  std::remove(spill_path.c_str());
  MutexLock lock(&mu_);
  spill_ = spill;
  spill_error_ = Status::Ok();
  ring_events_ = RoundUpPow2(std::max<int64_t>(options.ring_events, 64));
  writer_ = std::move(writer);
  ++sessions_;
  // Session numbers wrap inside the state word; 0 is never a live session.
  session_ = (session_ + 1) & (~0u >> kSessionShift);
  if (session_ == 0) session_ = 1;
  levels_ = options.levels & kLevelMask;
  if ((levels_ & kVerbose) != 0) levels_ = kLevelMask;
  dropped_ = 0;
  stale_ = 0;
  threads_.clear();
  for (const auto& b : buffers_) b->dropped.store(0, std::memory_order_relaxed);
  start_ns_ = NowNs();
  stop_flusher_ = false;
  g_state.store((session_ << kSessionShift) | levels_, std::memory_order_release);
  if ((levels_ & kKernel) != 0) SetPoolShareObserver(&ObservePoolShare);
  flusher_ = std::thread([this, ms = std::max(1, options.flush_interval_ms)] { FlushLoop(ms); });
  return Status::Ok();
}

void Recorder::FlushLoop(int interval_ms) {
  MutexLock lock(&mu_);
  while (!stop_flusher_) {
    wake_.WaitFor(&mu_, std::chrono::milliseconds(interval_ms));
    DrainLocked();
  }
}

void Recorder::DrainLocked() {
  if (spill_ == nullptr) return;
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    ThreadBuffer& b = **it;
    const bool retired = b.retired.load(std::memory_order_acquire);
    const uint64_t tail = b.tail.load(std::memory_order_relaxed);
    const uint64_t head = b.head.load(std::memory_order_acquire);
    if (head > tail && spill_error_.ok()) {
      const SpillHeader h{b.tid, static_cast<int64_t>(head - tail)};
      const uint64_t first = tail & b.mask;
      const uint64_t run = std::min(head - tail, b.mask + 1 - first);
      bool ok = std::fwrite(&h, sizeof(h), 1, spill_) == 1;
      ok = ok && std::fwrite(&b.ring[first], sizeof(Event), run, spill_) == run;
      const uint64_t rest = head - tail - run;
      ok = ok && (rest == 0 || std::fwrite(&b.ring[0], sizeof(Event), rest, spill_) == rest);
      if (!ok) spill_error_ = IoError("profile output: spilling events: {}", DescribeErrno(errno));
      threads_.emplace(b.tid, nullptr);
    }
    b.tail.store(head, std::memory_order_release);
    dropped_ += b.dropped.exchange(0, std::memory_order_relaxed);
    if (auto t = threads_.find(b.tid); t != threads_.end()) {
      t->second = b.name.load(std::memory_order_acquire);
    }
    // A thread that has exited will never push again: its ring can go once
    // read (the tid stays in threads_ for the name).
    if (retired) {
      it = buffers_.erase(it);
    } else {
      ++it;
    }
  }
}

Status Recorder::WriteSpilledLocked(TraceWriter* writer) {
  DSV4_RETURN_IF_ERROR(spill_error_);
  if (std::fflush(spill_) != 0 || std::fseek(spill_, 0, SEEK_SET) != 0) {
    return IoError("profile output: rereading spilled events: {}", DescribeErrno(errno));
  }
  const int pid = ::getpid();
  std::vector<Event> chunk(4096);
  SpillHeader h;
  while (std::fread(&h, sizeof(h), 1, spill_) == 1) {
    for (int64_t left = h.count; left > 0;) {
      const auto n = static_cast<size_t>(std::min<int64_t>(left, 4096));
      if (std::fread(chunk.data(), sizeof(Event), n, spill_) != n) {
        return IoError("profile output: spilled events truncated");
      }
      for (size_t i = 0; i < n; ++i) {
        if (chunk[i].session != session_) {
          ++stale_;
          continue;
        }
        writer->Write(chunk[i], pid, h.tid);
      }
      left -= static_cast<int64_t>(n);
    }
  }
  return Status::Ok();
}

Result<SessionSummary> Recorder::Stop() {
  MutexLock control(&control_mu_);
  {
    MutexLock lock(&mu_);
    if (writer_ == nullptr) return FailedPrecondition("no profile is running");
    // Off first: events begun from here on are not recorded; spans still
    // open end with this session's number and are dropped as stale by the
    // next session's drains.
    g_state.store(0, std::memory_order_release);
    SetPoolShareObserver(nullptr);
    stop_flusher_ = true;
    wake_.SignalAll();
  }
  flusher_.join();
  MutexLock lock(&mu_);
  DrainLocked();
  std::unique_ptr<TraceWriter> writer = std::move(writer_);
  const Status spilled = WriteSpilledLocked(writer.get());
  std::fclose(spill_);
  spill_ = nullptr;
  DSV4_RETURN_IF_ERROR(spilled);
  const int pid = ::getpid();
  for (const auto& [tid, name] : threads_) {
    writer->WriteThreadName(pid, tid,
                            name != nullptr ? name : Intern("thread-" + std::to_string(tid)));
  }
  SessionSummary s;
  s.path = writer->path();
  s.levels = levels_;
  s.dropped_events = dropped_;
  s.seconds = static_cast<double>(NowNs() - start_ns_) * 1e-9;
  s.events = writer->events();
  fmt::memory_buffer other;
  fmt::format_to(std::back_inserter(other),
                 "{{\"producer\":\"dsv4\",\"levels\":\"{}\",\"dropped_events\":{},"
                 "\"stale_events\":{},\"session\":{},\"seconds\":{:.6f}}}",
                 LevelsName(levels_), dropped_, stale_, sessions_, s.seconds);
  DSV4_ASSIGN_OR_RETURN(s.bytes, writer->Finish(fmt::to_string(other)));
  return s;
}

// The thread's ring (created at its first event, so a thread that never
// records while a session runs costs no memory) and its name; marks the ring
// retired when the thread exits.
struct TlsBuffer {
  ThreadBuffer* buffer = nullptr;
  const char* name = nullptr;
  ~TlsBuffer() {
    if (buffer != nullptr) buffer->retired.store(true, std::memory_order_release);
  }
};
thread_local TlsBuffer tls_buffer;

}  // namespace

ThreadBuffer* CurrentBuffer() {
  TlsBuffer& t = tls_buffer;
  if (t.buffer == nullptr) t.buffer = Recorder::Get().Register(t.name);
  return t.buffer;
}

void NameThread(const char* name) {
  TlsBuffer& t = tls_buffer;
  t.name = name;
  if (t.buffer != nullptr) t.buffer->name.store(name, std::memory_order_release);
}

}  // namespace internal

Status StartSession(const SessionOptions& options) {
  return internal::Recorder::Get().Start(options);
}
Result<SessionSummary> StopSession() { return internal::Recorder::Get().Stop(); }
bool SessionActive() { return internal::Recorder::Get().Active(); }
int SessionsStarted() { return internal::Recorder::Get().Started(); }

}  // namespace dsv4::profile
