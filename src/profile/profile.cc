// The recording calls (profile.h): everything here runs on the recording
// thread and takes no lock, except Intern (load time).
#include "profile/profile.h"

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_set>

#include "base/mutex.h"
#include "profile/recorder.h"

namespace dsv4::profile {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point Epoch() {
  static const Clock::time_point epoch = Clock::now();
  return epoch;
}

// Initialised before main, so the epoch is the process start and NowNs()
// never races on the static's guard in a hot loop.
[[maybe_unused]] const Clock::time_point g_epoch_init = Epoch();

uint32_t SessionOf(uint32_t state) { return state >> internal::kSessionShift; }

void Fill(Event* e, const char* cat, const char* name, std::initializer_list<Arg> args) {
  e->cat = cat;
  e->name = name;
  for (const Arg& a : args) {
    if (e->num_args == kMaxArgs) break;
    e->args[e->num_args++] = a;
  }
}

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - Epoch()).count();
}

void Record(const Event& e) { internal::Push(internal::CurrentBuffer(), e); }

void Span::Finish() {
  active_ = false;
  Event e;
  e.name = name_;
  e.cat = cat_;
  e.str_key = str_key_;
  e.str_value = str_value_;
  e.ts_ns = start_ns_;
  e.dur_ns = NowNs() - start_ns_;
  e.session = session_;
  e.phase = 'X';
  e.num_args = num_args_;
  std::copy_n(args_, num_args_, e.args);
  Record(e);
}

const char* Intern(std::string_view s) {
  // Never freed: interned names must outlive every trace that holds them.
  static Mutex* mu = new Mutex();
  static auto* names = new std::unordered_set<std::string>();
  MutexLock lock(mu);
  return names->emplace(s).first->c_str();
}

void SetThreadName(const char* name) { internal::NameThread(name); }

void Complete(uint32_t level, const char* cat, const char* name, int64_t ts_ns, int64_t dur_ns,
              std::initializer_list<Arg> args, const char* str_key, const char* str_value) {
  const uint32_t state = internal::g_state.load(std::memory_order_relaxed);
  if ((state & level) == 0) return;
  Event e;
  Fill(&e, cat, name, args);
  e.phase = 'X';
  e.session = SessionOf(state);
  e.ts_ns = ts_ns;
  e.dur_ns = dur_ns;
  e.str_key = str_key;
  e.str_value = str_value;
  Record(e);
}

namespace {

// An instant ('i') or counter ('C') event: a point in time with arguments.
void RecordPoint(char phase, uint32_t level, const char* cat, const char* name,
                 std::initializer_list<Arg> args, int64_t ts_ns) {
  const uint32_t state = internal::g_state.load(std::memory_order_relaxed);
  if ((state & level) == 0) return;
  Event e;
  Fill(&e, cat, name, args);
  e.phase = phase;
  e.session = SessionOf(state);
  e.ts_ns = ts_ns >= 0 ? ts_ns : NowNs();
  Record(e);
}

}  // namespace

void Instant(uint32_t level, const char* cat, const char* name, std::initializer_list<Arg> args,
             int64_t ts_ns) {
  RecordPoint('i', level, cat, name, args, ts_ns);
}

void Counter(uint32_t level, const char* cat, const char* name, std::initializer_list<Arg> values,
             int64_t ts_ns) {
  RecordPoint('C', level, cat, name, values, ts_ns);
}

void AsyncBegin(uint32_t level, const char* cat, const char* name, uint64_t id, int64_t ts_ns,
                std::initializer_list<Arg> args) {
  const uint32_t state = internal::g_state.load(std::memory_order_relaxed);
  if ((state & level) == 0) return;
  Event e;
  Fill(&e, cat, name, args);
  e.phase = 'b';
  e.id = id;
  e.session = SessionOf(state);
  e.ts_ns = ts_ns >= 0 ? ts_ns : NowNs();
  Record(e);
}

void AsyncEnd(uint32_t level, const char* cat, const char* name, uint64_t id, int64_t ts_ns,
              std::initializer_list<Arg> args, const char* str_key, const char* str_value) {
  const uint32_t state = internal::g_state.load(std::memory_order_relaxed);
  if ((state & level) == 0) return;
  Event e;
  Fill(&e, cat, name, args);
  e.phase = 'e';
  e.id = id;
  e.session = SessionOf(state);
  e.ts_ns = ts_ns >= 0 ? ts_ns : NowNs();
  e.str_key = str_key;
  e.str_value = str_value;
  Record(e);
}

}  // namespace dsv4::profile
