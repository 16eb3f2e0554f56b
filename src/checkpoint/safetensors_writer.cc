#include "checkpoint/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "checkpoint/checkpoint.h"

namespace dsv4 {

namespace {

using nlohmann::json;

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string TempPathFor(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return DirOf(path) + "/." + base + ".tmp";
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError("{}: write failed: {}", path, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Result<int> OpenTemp(const std::string& temp_path) {
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("{}: cannot create: {}", temp_path, std::strerror(errno));
  return fd;
}

// fsync + close `fd`, rename temp -> final, fsync the directory so the rename
// itself survives a crash.  Closes fd in every case.
Status Publish(int fd, const std::string& temp_path, const std::string& path) {
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError("{}: fsync failed: {}", temp_path, std::strerror(err));
  }
  if (::close(fd) != 0) return IoError("{}: close failed: {}", temp_path, std::strerror(errno));
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    return IoError("{}: cannot rename to {}: {}", temp_path, path, std::strerror(errno));
  }
  const std::string dir = DirOf(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return IoError("{}: cannot open directory: {}", dir, std::strerror(errno));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return IoError("{}: fsync failed: {}", dir, std::strerror(err));
  return Status::Ok();
}

// Byte size of a tensor, or an error if a dimension is negative or it overflows.
Result<uint64_t> TensorBytes(const SafetensorsTensorInfo& t, const std::string& path) {
  uint64_t n = DTypeSize(t.dtype);
  for (int64_t d : t.shape) {
    if (d < 0) return InvalidArgument("{}: tensor '{}': negative dimension", path, t.name);
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud) {
      return InvalidArgument("{}: tensor '{}': byte size overflows", path, t.name);
    }
    n *= ud;
  }
  return n;
}

// The header JSON, space-padded so that 8 + its length is a multiple of 8.
std::string BuildHeader(const std::vector<SafetensorsTensorInfo>& tensors,
                        const std::vector<uint64_t>& sizes,
                        const std::map<std::string, std::string>& metadata) {
  json root = json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    root[tensors[i].name] = {{"dtype", std::string(DTypeName(tensors[i].dtype))},
                             {"shape", tensors[i].shape},
                             {"data_offsets", {offset, offset + sizes[i]}}};
    offset += sizes[i];
  }
  std::string text = root.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, std::vector<SafetensorsTensorInfo> tensors,
    const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  w->temp_path_ = TempPathFor(path);
  std::set<std::string_view> names;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return InvalidArgument("{}: invalid tensor name '{}'", path, t.name);
    }
    if (!names.insert(t.name).second) {
      return InvalidArgument("{}: tensor '{}' given twice", path, t.name);
    }
    DSV4_ASSIGN_OR_RETURN(uint64_t bytes, TensorBytes(t, path));
    if (w->data_bytes_ > std::numeric_limits<uint64_t>::max() - bytes) {
      return InvalidArgument("{}: total size overflows", path);
    }
    w->sizes_.push_back(bytes);
    w->data_bytes_ += bytes;
  }
  w->tensors_ = std::move(tensors);
  const std::string header = BuildHeader(w->tensors_, w->sizes_, metadata);
  uint8_t len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<uint8_t>(n & 0xff);
  DSV4_ASSIGN_OR_RETURN(w->fd_, OpenTemp(w->temp_path_));
  DSV4_RETURN_IF_ERROR(w->Fail(WriteAll(w->fd_, len, 8, w->temp_path_)));
  DSV4_RETURN_IF_ERROR(w->Fail(WriteAll(w->fd_, header.data(), header.size(), w->temp_path_)));
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

Status SafetensorsWriter::Fail(Status s) {
  if (!s.ok()) failed_ = true;
  return s;
}

Status SafetensorsWriter::Write(std::string_view name, const void* data, size_t nbytes) {
  if (failed_ || finished_) {
    return FailedPrecondition("{}: writer is {}", path_, failed_ ? "failed" : "finished");
  }
  if (next_ == tensors_.size()) {
    return Fail(
        InvalidArgument("{}: tensor '{}': every declared tensor is already written", path_, name));
  }
  const SafetensorsTensorInfo& t = tensors_[next_];
  if (name != t.name) {
    return Fail(InvalidArgument("{}: got bytes for tensor '{}' but tensor '{}' comes next", path_,
                                name, t.name));
  }
  if (nbytes > sizes_[next_] - written_) {
    return Fail(InvalidArgument("{}: tensor '{}': {} bytes written, more than its {} bytes", path_,
                                name, written_ + nbytes, sizes_[next_]));
  }
  DSV4_RETURN_IF_ERROR(Fail(WriteAll(fd_, data, nbytes, temp_path_)));
  written_ += nbytes;
  if (written_ == sizes_[next_]) {
    ++next_;
    written_ = 0;
  }
  return Status::Ok();
}

Status SafetensorsWriter::Finish() {
  if (failed_ || finished_) {
    return FailedPrecondition("{}: writer is {}", path_, failed_ ? "failed" : "finished");
  }
  if (next_ != tensors_.size()) {
    return Fail(FailedPrecondition("{}: tensor '{}' is incomplete ({} of {} bytes written)", path_,
                                   tensors_[next_].name, written_, sizes_[next_]));
  }
  const int fd = fd_;
  fd_ = -1;  // Publish closes it
  DSV4_RETURN_IF_ERROR(Fail(Publish(fd, temp_path_, path_)));
  finished_ = true;
  return Status::Ok();
}

Status WriteSafetensorsFile(const std::string& path,
                            const std::vector<SafetensorsTensorData>& tensors,
                            const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsTensorInfo> infos;
  infos.reserve(tensors.size());
  for (const auto& t : tensors) infos.push_back({t.name, t.dtype, t.shape});
  DSV4_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::Create(path, std::move(infos), metadata));
  for (const auto& t : tensors) {
    const size_t nbytes = static_cast<size_t>(NumElements(t.shape)) * DTypeSize(t.dtype);
    DSV4_RETURN_IF_ERROR(writer->Write(t.name, t.data, nbytes));
  }
  return writer->Finish();
}

Status WriteIndexJson(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                      uint64_t total_size) {
  const std::string path = dir + "/model.safetensors.index.json";
  for (const auto& [tensor, shard] : weight_map) {
    if (!IsSafeShardName(shard)) {
      return InvalidArgument("{}: tensor '{}': unsafe shard name '{}'", path, tensor, shard);
    }
  }
  json root = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  return WriteFileAtomic(path, root.dump(2) + "\n");
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  const std::string temp_path = TempPathFor(path);
  DSV4_ASSIGN_OR_RETURN(int fd, OpenTemp(temp_path));
  Status s = WriteAll(fd, contents.data(), contents.size(), temp_path);
  if (!s.ok()) {
    ::close(fd);
    ::unlink(temp_path.c_str());
    return s;
  }
  s = Publish(fd, temp_path, path);
  if (!s.ok()) ::unlink(temp_path.c_str());
  return s;
}

}  // namespace dsv4
