#include "base/logging.h"

#include <atomic>

#include "base/mutex.h"

namespace dsv4 {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
Mutex g_mu;  // serializes whole lines from concurrent threads (guards stderr)
const char* LevelTag(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarning:
      return "W";
    case LogLevel::kError:
      return "E";
  }
  return "?";
}
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void LogLine(LogLevel level, const std::string& line) {
  MutexLock lock(&g_mu);
  std::fprintf(stderr, "[dsv4 %s] %s\n", LevelTag(level), line.c_str());
}

void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "[dsv4 F] %s:%d: CHECK failed: %s %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace dsv4
