// Minimal leveled logging to stderr and CHECK for broken invariants.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace dsv4 {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// The threshold is process-wide configuration set once by the CLI at startup
// (--log-level); it is not state any computation depends on.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogLine(LogLevel level, const std::string& line);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < GetLogLevel()) return;
  LogLine(level, fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace dsv4

#define DSV4_LOG_INFO(...) ::dsv4::Log(::dsv4::LogLevel::kInfo, __VA_ARGS__)
#define DSV4_LOG_WARN(...) ::dsv4::Log(::dsv4::LogLevel::kWarning, __VA_ARGS__)
#define DSV4_LOG_ERROR(...) ::dsv4::Log(::dsv4::LogLevel::kError, __VA_ARGS__)
#define DSV4_LOG_DEBUG(...) ::dsv4::Log(::dsv4::LogLevel::kDebug, __VA_ARGS__)

// CHECK: an invariant of the program itself, never input validation.
#define DSV4_CHECK(cond)                                             \
  do {                                                               \
    if (!(cond)) ::dsv4::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)
#define DSV4_CHECK_MSG(cond, ...)                                                          \
  do {                                                                                     \
    if (!(cond)) ::dsv4::CheckFailed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)
