// Streams events into a Chrome trace-event JSON file ("JSON object format":
// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}), the
// format Perfetto and chrome://tracing open.  The file is written under a
// temporary name in the trace's directory and renamed into place by Finish,
// so the trace path only ever holds a complete file.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "base/status.h"
#include "profile/profile.h"

namespace dsv4::profile {

class TraceWriter {
 public:
  // Creates the directory of `path` if needed and opens the temporary file.
  static Result<std::unique_ptr<TraceWriter>> Open(const std::string& path);
  ~TraceWriter();  // removes the temporary file unless Finish succeeded
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Timestamps in the file are microseconds (fractional) from the trace epoch.
  void Write(const Event& e, int pid, int tid);
  // Metadata events ('M') naming the process and a thread.
  void WriteProcessName(int pid, const char* name);
  void WriteThreadName(int pid, int tid, const char* name);

  // Closes the event array, adds `other_data_json` (a JSON object) as
  // "otherData", flushes to disk and renames the file to the trace path.
  // Returns the file's size.
  Result<int64_t> Finish(const std::string& other_data_json);

  int64_t events() const { return events_; }
  const std::string& path() const { return path_; }

 private:
  TraceWriter(std::string path, std::string temp, std::FILE* f)
      : path_(std::move(path)), temp_(std::move(temp)), f_(f) {}
  void BeginEvent();
  Status FlushBuffer();

  std::string path_;
  std::string temp_;
  std::FILE* f_;
  fmt::memory_buffer buf_;
  int64_t events_ = 0;
  bool first_ = true;
  bool finished_ = false;
  Status error_;  // the first write error; Finish reports it
};

// `s` as a JSON string literal (quotes included).
void AppendJsonString(fmt::memory_buffer* out, const char* s);

}  // namespace dsv4::profile
