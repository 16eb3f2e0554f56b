// Progress of a long operation (make-tiny, prepack, convert, load) for the
// person waiting on it: on a terminal one line rewritten in place at most
// five times a second ("make-tiny  45%  1.2 / 2.6 GiB  310 MiB/s  ETA 5 s"); when
// stderr is not a terminal (logs, CI) a plain line at most every 10 s, so a
// short run prints nothing.  The caller logs its own one-line summary when
// done (what it made, how big, how long); Finish clears the live line first.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "base/mutex.h"

namespace dsv4 {

enum class ProgressUnit { kBytes, kItems };

// One report: label, percentage, amount done / total, rate, and the time left
// at that rate ("ETA 5 s") while unfinished.  Pure, for tests.
std::string FormatProgress(const std::string& label, int64_t done, int64_t total, ProgressUnit unit,
                           double seconds);

// The one-line summary a caller logs when done: "convert: 4.0 GiB in 12 s
// (341.3 MiB/s)".  Pure, for tests.
std::string FormatProgressSummary(const std::string& label, int64_t done, ProgressUnit unit,
                                  double seconds);

class Progress {
 public:
  // Seconds between plain (not a terminal) lines.
  static constexpr double kPlainInterval = 10.0;

  // total > 0 units of work; reports go to `out` (stderr by default).
  // plain_interval: seconds between lines when `out` is not a terminal
  // (tests pass 0 to see every report).
  Progress(std::string label, int64_t total, ProgressUnit unit, std::FILE* out = stderr,
           double plain_interval = kPlainInterval);
  ~Progress();  // Finish() if not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Adds n units done; thread-safe.  Prints when a report is due.
  void Add(int64_t n) EXCLUDES(mu_);
  // Ends the reports: on a terminal the live line is erased, so the caller's
  // summary takes its place.  Later Adds print nothing.
  void Finish() EXCLUDES(mu_);
  // Erases the live line (terminal only) so the caller can print a line of
  // its own; the next Add draws it again.
  void ClearLine() EXCLUDES(mu_);
  // FormatProgressSummary of the work done so far and the time since the
  // start.
  std::string Summary() const EXCLUDES(mu_);

 private:
  double Elapsed() const;

  const std::string label_;
  const int64_t total_;
  const ProgressUnit unit_;
  std::FILE* const out_;
  const bool tty_;
  const double plain_interval_;
  const int64_t start_ns_;
  mutable Mutex mu_;
  int64_t done_ GUARDED_BY(mu_) = 0;
  double last_report_ GUARDED_BY(mu_) = 0;
  bool finished_ GUARDED_BY(mu_) = false;
  bool line_open_ GUARDED_BY(mu_) = false;  // a TTY line awaits its newline
};

}  // namespace dsv4
