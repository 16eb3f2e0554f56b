// Starting and stopping a trace session (docs/profiling.md).  One session at
// a time per process: Start turns the levels on and starts the flusher,
// which streams every thread's ring into a temporary file next to the trace;
// Stop turns the levels off, drains the rings, closes the JSON and renames
// the file into place (a reader never sees a half-written trace).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dsv4::profile {

struct SessionOptions {
  uint32_t levels = 0;  // profile::Level bits, at least one
  std::string path;     // the trace file (profile/options.h TracePath)
  // Ring capacity of each recording thread, in events (rounded up to a power
  // of two).  The flusher drains every `flush_interval_ms`; a thread that
  // records more than a ring holds in that time loses the excess (counted).
  int64_t ring_events = 1 << 13;
  int flush_interval_ms = 10;
};

struct SessionSummary {
  std::string path;
  uint32_t levels = 0;
  int64_t events = 0;          // written to the trace
  int64_t dropped_events = 0;  // lost to full rings
  int64_t bytes = 0;           // size of the trace file
  double seconds = 0;          // session length
};

// FailedPrecondition when a session is already running; IoError (naming the
// path) when the trace's directory cannot be created or the file opened.
Status StartSession(const SessionOptions& options);
// FailedPrecondition ("no profile is running") without a session.  The
// session ends even when writing fails (IoError naming the path).
Result<SessionSummary> StopSession();
bool SessionActive();
// Sessions started so far in this process (names trace-<n>.json files).
int SessionsStarted();

}  // namespace dsv4::profile
