#include "profile/trace_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "base/file_util.h"

namespace dsv4::profile {
namespace {

constexpr size_t kFlushBytes = 1 << 20;

void AppendTs(fmt::memory_buffer* out, int64_t ns) {
  if (ns < 0) {
    out->push_back('-');
    ns = -ns;
  }
  fmt::format_to(std::back_inserter(*out), "{}.{:03}", ns / 1000, ns % 1000);
}

void AppendNumber(fmt::memory_buffer* out, double v) {
  if (std::isfinite(v)) {
    fmt::format_to(std::back_inserter(*out), "{}", v);
  } else {
    fmt::format_to(std::back_inserter(*out), "null");  // JSON has no NaN/Inf
  }
}

}  // namespace

void AppendJsonString(fmt::memory_buffer* out, const char* s) {
  out->push_back('"');
  for (const char* p = s != nullptr ? s : ""; *p != '\0'; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      fmt::format_to(std::back_inserter(*out), "\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

Result<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) {
      return IoError("profile output: cannot create directory {}: {}", p.parent_path().string(),
                     ec.message());
    }
  }
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (f == nullptr) {
    return IoError("profile output: cannot write {}: {}", temp, DescribeErrno(errno));
  }
  std::unique_ptr<TraceWriter> w(new TraceWriter(path, temp, f));
  fmt::format_to(std::back_inserter(w->buf_), "{{\"traceEvents\":[");
  return w;
}

TraceWriter::~TraceWriter() {
  if (f_ != nullptr) std::fclose(f_);
  if (!finished_) std::remove(temp_.c_str());
}

void TraceWriter::BeginEvent() {
  if (!first_) buf_.push_back(',');
  buf_.push_back('\n');
  first_ = false;
  ++events_;
}

Status TraceWriter::FlushBuffer() {
  if (buf_.size() == 0 || !error_.ok()) return error_;
  if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size()) {
    error_ = IoError("profile output: writing {}: {}", temp_, DescribeErrno(errno));
  }
  buf_.clear();
  return error_;
}

void TraceWriter::Write(const Event& e, int pid, int tid) {
  BeginEvent();
  auto out = std::back_inserter(buf_);
  buf_.append(std::string_view("{\"name\":"));
  AppendJsonString(&buf_, e.name);
  buf_.append(std::string_view(",\"cat\":"));
  AppendJsonString(&buf_, e.cat);
  fmt::format_to(out, ",\"ph\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":", e.phase, pid, tid);
  AppendTs(&buf_, e.ts_ns);
  if (e.phase == 'X') {
    buf_.append(std::string_view(",\"dur\":"));
    AppendTs(&buf_, e.dur_ns);
  }
  if (e.phase == 'b' || e.phase == 'e') fmt::format_to(out, ",\"id\":{}", e.id);
  if (e.phase == 'i') buf_.append(std::string_view(",\"s\":\"t\""));
  if (e.num_args > 0 || e.str_key != nullptr) {
    buf_.append(std::string_view(",\"args\":{"));
    for (int i = 0; i < e.num_args; ++i) {
      if (i > 0) buf_.push_back(',');
      AppendJsonString(&buf_, e.args[i].key);
      buf_.push_back(':');
      AppendNumber(&buf_, e.args[i].value);
    }
    if (e.str_key != nullptr) {
      if (e.num_args > 0) buf_.push_back(',');
      AppendJsonString(&buf_, e.str_key);
      buf_.push_back(':');
      AppendJsonString(&buf_, e.str_value);
    }
    buf_.push_back('}');
  }
  buf_.push_back('}');
  if (buf_.size() >= kFlushBytes) (void)FlushBuffer();
}

void TraceWriter::WriteProcessName(int pid, const char* name) {
  BeginEvent();
  fmt::format_to(
      std::back_inserter(buf_),
      "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":", pid);
  AppendJsonString(&buf_, name);
  buf_.append(std::string_view("}}"));
}

void TraceWriter::WriteThreadName(int pid, int tid, const char* name) {
  BeginEvent();
  fmt::format_to(
      std::back_inserter(buf_),
      "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", pid,
      tid);
  AppendJsonString(&buf_, name);
  buf_.append(std::string_view("}}"));
}

Result<int64_t> TraceWriter::Finish(const std::string& other_data_json) {
  fmt::format_to(std::back_inserter(buf_), "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{}}}\n",
                 other_data_json);
  DSV4_RETURN_IF_ERROR(FlushBuffer());
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) {
    return IoError("profile output: flushing {}: {}", temp_, DescribeErrno(errno));
  }
  const long size = std::ftell(f_);
  std::fclose(f_);
  f_ = nullptr;
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    return IoError("profile output: renaming {} to {}: {}", temp_, path_, DescribeErrno(errno));
  }
  finished_ = true;
  return static_cast<int64_t>(size);
}

}  // namespace dsv4::profile
