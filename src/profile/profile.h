// The trace recorder's recording side (docs/profiling.md).
//
// Code marks what it does with spans, instants, counters and async (request
// lifetime) events at one of three levels: kE2e (engine steps, requests,
// HTTP), kKernel (every op of the forward, pool shares) and kVerbose
// (scheduler decisions, cache page movements).  A session (profile/session.h)
// turns a set of levels on; while none is on every call site costs one relaxed
// atomic load and a predictable branch, and records nothing.
//
// While a level is on, an event goes into the calling thread's own ring of
// fixed capacity (no lock, no allocation after the thread's first event);
// a flusher thread streams the rings to the trace file, so memory stays
// bounded however long a session runs (a ring that fills faster than it is
// drained drops events and counts them).
//
// Names, categories and argument keys are `const char*` that must live as
// long as the process: string literals, or Intern() for names built at
// load time (layer names).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <type_traits>

namespace dsv4::profile {

// Level bits.  verbose implies the other two (docs/profiling.md "Levels").
enum Level : uint32_t {
  kE2e = 1u << 0,
  kKernel = 1u << 1,
  kVerbose = 1u << 2,
};
inline constexpr uint32_t kLevelMask = kE2e | kKernel | kVerbose;

namespace internal {
// Low byte: the enabled level bits; above: the session number, so an event
// that was begun in one session and ends after a later one began is told
// apart (and dropped) when the rings are drained.
inline std::atomic<uint32_t> g_state{0};
inline constexpr uint32_t kSessionShift = 8;
}  // namespace internal

// The one check every call site makes first.
inline bool Enabled(uint32_t level) {
  return (internal::g_state.load(std::memory_order_relaxed) & level) != 0;
}

// The running session's number (0 when none): lets a tracker that opens an
// async track in one session avoid closing it in another.
inline uint32_t CurrentSession() {
  return internal::g_state.load(std::memory_order_relaxed) >> internal::kSessionShift;
}

// Nanoseconds on the steady clock since the process's trace epoch (the
// recorder's first use); what every event's timestamp is measured in.
int64_t NowNs();

// One numeric argument of an event (batch rows, bytes, FLOPs, layer).
// Any arithmetic value converts (rows, bytes, FLOPs are integers).  Trivially
// default-constructible, so an inactive Span's argument slots cost nothing.
struct Arg {
  Arg() = default;
  template <typename T>
  requires std::is_arithmetic_v<T>
  constexpr Arg(const char* k, T v) : key(k), value(static_cast<double>(v)) {}
  const char* key;
  double value;
};
inline constexpr int kMaxArgs = 6;

// An event as it sits in a ring.  `phase` is the trace-event format's: 'X'
// complete span, 'i' instant, 'C' counter, 'b'/'e' async begin/end.
struct Event {
  const char* name = nullptr;
  const char* cat = nullptr;
  const char* str_key = nullptr;  // one optional string argument (a finish reason)
  const char* str_value = nullptr;
  int64_t ts_ns = 0;
  int64_t dur_ns = 0;
  uint64_t id = 0;  // async events: the track (a request id)
  uint32_t session = 0;
  char phase = 'X';
  uint8_t num_args = 0;
  Arg args[kMaxArgs] = {};
};

// Appends `e` (its session set by the caller) to the calling thread's ring.
void Record(const Event& e);

// A stable copy of `s` for use as a name (layer names built at load).  Takes
// a lock: call it at load time, never per step.
const char* Intern(std::string_view s);

// Names the calling thread in traces ("engine", "pool-3", "http-1").  The
// name must live as long as the process (a literal or Intern()).
void SetThreadName(const char* name);

// A scoped span ('X'): records [construction, destruction) if `level` was on
// at construction.  Arguments added while inactive are ignored, so
//   profile::Span s(profile::kKernel, "kernel", "attention");
//   if (s) s.Arg("flops", Flops(...));
// computes arguments only when recording.
class Span {
 public:
  // Only the level check and the flag are paid when the level is off: the
  // other members stay uninitialised until the span is active.
  Span(uint32_t level, const char* cat, const char* name) {
    const uint32_t state = internal::g_state.load(std::memory_order_relaxed);
    if ((state & level) == 0) return;
    Begin(state, cat, name);
  }
  ~Span() { End(); }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  explicit operator bool() const { return active_; }

  Span& Arg(const char* key, double value) {
    if (active_ && num_args_ < kMaxArgs) args_[num_args_++] = {key, value};
    return *this;
  }
  Span& Str(const char* key, const char* value) {
    if (active_) {
      str_key_ = key;
      str_value_ = value;
    }
    return *this;
  }
  // Ends the span now (idempotent; the destructor calls it).
  void End() {
    if (active_) Finish();
  }

 private:
  void Begin(uint32_t state, const char* cat, const char* name) {
    active_ = true;
    num_args_ = 0;
    session_ = state >> internal::kSessionShift;
    cat_ = cat;
    name_ = name;
    str_key_ = nullptr;
    str_value_ = nullptr;
    start_ns_ = NowNs();
  }
  void Finish();  // records the event (profile.cc)

  bool active_ = false;
  uint8_t num_args_;
  uint32_t session_;
  const char* cat_;
  const char* name_;
  const char* str_key_;
  const char* str_value_;
  int64_t start_ns_;
  profile::Arg args_[kMaxArgs];
};

// A complete span with explicit times (ts, dur in ns from NowNs()).
void Complete(uint32_t level, const char* cat, const char* name, int64_t ts_ns, int64_t dur_ns,
              std::initializer_list<Arg> args = {}, const char* str_key = nullptr,
              const char* str_value = nullptr);
// A thread-scoped instant event at `ts_ns` (default: now).
void Instant(uint32_t level, const char* cat, const char* name,
             std::initializer_list<Arg> args = {}, int64_t ts_ns = -1);
// A counter sample ('C'): one series per key, plotted as a track.
void Counter(uint32_t level, const char* cat, const char* name, std::initializer_list<Arg> values,
             int64_t ts_ns = -1);
// Async begin/end on the track `id` of category `cat` (nested pairs on one
// track draw as nested slices): a request's lifetime and its phases.
void AsyncBegin(uint32_t level, const char* cat, const char* name, uint64_t id, int64_t ts_ns = -1,
                std::initializer_list<Arg> args = {});
void AsyncEnd(uint32_t level, const char* cat, const char* name, uint64_t id, int64_t ts_ns = -1,
              std::initializer_list<Arg> args = {}, const char* str_key = nullptr,
              const char* str_value = nullptr);

}  // namespace dsv4::profile
