#include "base/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace dsv4 {
namespace {

constexpr double kTtyInterval = 0.2;  // seconds between in-place updates

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Amount(double v, ProgressUnit unit) {
  if (unit == ProgressUnit::kItems) return fmt::format("{:.0f}", v);
  static const char* const kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (v >= 1024.0 && i < 4) {
    v /= 1024.0;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.1f} {}", v, kNames[i]);
}

std::string Duration(double s) {
  if (s < 10) return fmt::format("{:.1f} s", s);
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 3600) return fmt::format("{:.0f} min {:02.0f} s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f} h {:02.0f} min", std::floor(s / 3600), std::fmod(s / 60, 60));
}

std::string Rate(double per_second, ProgressUnit unit) {
  return unit == ProgressUnit::kBytes ? Amount(per_second, unit) + "/s"
                                      : fmt::format("{:.1f}/s", per_second);
}

}  // namespace

std::string FormatProgress(const std::string& label, int64_t done, int64_t total, ProgressUnit unit,
                           double seconds) {
  const double frac = total > 0 ? std::clamp(double(done) / double(total), 0.0, 1.0) : 1.0;
  std::string s = fmt::format("{} {:3.0f}%  {} / {}", label, 100.0 * frac, Amount(done, unit),
                              Amount(total, unit));
  if (seconds <= 0 || done <= 0) return s;
  const double rate = double(done) / seconds;
  s += "  " + Rate(rate, unit);
  if (done < total) s += "  ETA " + Duration(double(total - done) / rate);
  return s;
}

std::string FormatProgressSummary(const std::string& label, int64_t done, ProgressUnit unit,
                                  double seconds) {
  std::string s = fmt::format("{}: {} in {}", label, Amount(double(done), unit), Duration(seconds));
  if (seconds > 0 && done > 0) s += " (" + Rate(double(done) / seconds, unit) + ")";
  return s;
}

Progress::Progress(std::string label, int64_t total, ProgressUnit unit, std::FILE* out,
                   double plain_interval)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      unit_(unit),
      out_(out),
      tty_(::isatty(::fileno(out)) == 1),
      plain_interval_(plain_interval),
      start_ns_(NowNs()) {}

void Progress::ClearLine() {
  MutexLock lock(&mu_);
  if (!line_open_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  line_open_ = false;
  last_report_ = -kTtyInterval;  // redraw at the next Add
}

std::string Progress::Summary() const {
  MutexLock lock(&mu_);
  return FormatProgressSummary(label_, done_, unit_, Elapsed());
}

Progress::~Progress() { Finish(); }

double Progress::Elapsed() const { return double(NowNs() - start_ns_) * 1e-9; }

void Progress::Add(int64_t n) {
  MutexLock lock(&mu_);
  done_ += n;
  if (finished_) return;
  const double t = Elapsed();
  if (t - last_report_ < (tty_ ? kTtyInterval : plain_interval_)) return;
  last_report_ = t;
  const std::string line = FormatProgress(label_, done_, total_, unit_, t);
  // \r + clear to end of line: the next report overwrites this one.
  std::fprintf(out_, tty_ ? "\r%s\x1b[K" : "%s\n", line.c_str());
  std::fflush(out_);
  line_open_ = tty_;
}

void Progress::Finish() {
  MutexLock lock(&mu_);
  if (finished_) return;
  finished_ = true;
  if (!line_open_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  line_open_ = false;
}

}  // namespace dsv4
