#include "checkpoint/safetensors_writer.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/checksum.h"
#include "checkpoint/checkpoint.h"

namespace dsv4::checkpoint {

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

// A stale temp file of a killed run is removed first and the new one created
// exclusively, so whatever was left at that name (a FIFO, a symlink) is never
// opened.  Read-write: Finish() reads the data back for its checksum.
Result<int> OpenTemp(const std::string& temp_path) {
  if (::unlink(temp_path.c_str()) != 0 && errno != ENOENT) {
    return IoError("{}: cannot remove the stale temp file: {}", temp_path, std::strerror(errno));
  }
  const int fd =
      ::open(temp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("{}: cannot create: {}", temp_path, std::strerror(errno));
  return fd;
}

// Creates "<dir>/.<name>.XXXXXX.tmp" exclusively; *temp_path receives its name.
Result<int> OpenUniqueTemp(const std::string& path, std::string* temp_path) {
  std::string name = TempPathFor(path);
  name.insert(name.size() - 4, ".XXXXXX");  // before ".tmp"
  const int fd = ::mkostemps(name.data(), 4, O_CLOEXEC);
  if (fd < 0) return IoError("{}: cannot create: {}", name, std::strerror(errno));
  *temp_path = std::move(name);
  return fd;
}

// Inserts zero-filled "__pad.<k>" U8 tensors so that, laid out in order, every
// tensor starts at a multiple of `alignment`.
void InsertPadding(uint64_t alignment, std::vector<SafetensorsTensorInfo>* tensors,
                   std::vector<uint64_t>* sizes) {
  std::vector<SafetensorsTensorInfo> out;
  std::vector<uint64_t> out_sizes;
  uint64_t offset = 0;
  int64_t num_pads = 0;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const uint64_t gap = (alignment - offset % alignment) % alignment;
    if (gap != 0 && (*sizes)[i] != 0) {
      out.push_back(
          {"__pad." + std::to_string(num_pads++), DType::kU8, {static_cast<int64_t>(gap)}});
      out_sizes.push_back(gap);
      offset += gap;
    }
    out.push_back(std::move((*tensors)[i]));
    out_sizes.push_back((*sizes)[i]);
    offset += (*sizes)[i];
  }
  *tensors = std::move(out);
  *sizes = std::move(out_sizes);
}

std::vector<uint64_t> InOrder(const std::vector<uint64_t>& sizes) {
  std::vector<uint64_t> offsets(sizes.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = offset;
    offset += sizes[i];
  }
  return offsets;
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

// Data-region offsets: by element size, largest first, so each tensor starts
// at a multiple of its element size (all sizes are powers of two).
std::vector<uint64_t> LayOut(const std::vector<SafetensorsTensorInfo>& tensors,
                             const std::vector<uint64_t>& sizes) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return DTypeSize(tensors[a].dtype) > DTypeSize(tensors[b].dtype);
  });
  std::vector<uint64_t> offsets(tensors.size());
  uint64_t offset = 0;
  for (size_t i : order) {
    offsets[i] = offset;
    offset += sizes[i];
  }
  return offsets;
}

// The header JSON, space-padded so that 8 + its length is a multiple of
// `alignment` (at least 8).
std::string BuildHeader(const std::vector<SafetensorsTensorInfo>& tensors,
                        const std::vector<uint64_t>& sizes, const std::vector<uint64_t>& offsets,
                        const std::map<std::string, std::string>& metadata, uint64_t alignment) {
  json root = json::object();
  if (!metadata.empty()) root["__metadata__"] = metadata;
  for (size_t i = 0; i < tensors.size(); ++i) {
    root[tensors[i].name] = {{"dtype", std::string(DTypeName(tensors[i].dtype))},
                             {"shape", tensors[i].shape},
                             {"data_offsets", {offsets[i], offsets[i] + sizes[i]}}};
  }
  std::string text = root.dump();
  alignment = std::max<uint64_t>(alignment, 8);
  text.append((alignment - (8 + text.size()) % alignment) % alignment, ' ');
  return text;
}

Status PwriteAll(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError("{}: write failed: {}", path, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, std::vector<SafetensorsTensorInfo> tensors,
    const std::map<std::string, std::string>& metadata, const SafetensorsWriterOptions& options) {
  const uint64_t alignment = options.alignment;
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) {
    return InvalidArgument("{}: alignment {} is not a power of two", path, alignment);
  }
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    if (alignment != 0 && t.name.rfind("__pad.", 0) == 0) {
      return InvalidArgument("{}: tensor name '{}' is reserved for padding", path, t.name);
    }
    DSV4_ASSIGN_OR_RETURN(uint64_t bytes, TensorBytes(t, path));
    sizes.push_back(bytes);
  }
  if (alignment != 0) InsertPadding(alignment, &tensors, &sizes);
  std::set<std::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensorInfo& t = tensors[i];
    if (t.name.empty() || t.name == "__metadata__") {
      return InvalidArgument("{}: invalid tensor name '{}'", path, t.name);
    }
    if (!names.insert(t.name).second) {
      return InvalidArgument("{}: tensor '{}' given twice", path, t.name);
    }
    const uint64_t bytes = sizes[i];
    if (w->data_bytes_ > std::numeric_limits<uint64_t>::max() - bytes) {
      return InvalidArgument("{}: total size overflows", path);
    }
    w->sizes_.push_back(bytes);
    w->data_bytes_ += bytes;
  }
  w->tensors_ = std::move(tensors);
  for (size_t i = 0; i < w->tensors_.size(); ++i) w->by_name_.emplace(w->tensors_[i].name, i);
  std::vector<uint64_t> offsets =
      alignment != 0 ? InOrder(w->sizes_) : LayOut(w->tensors_, w->sizes_);
  std::map<std::string, std::string> meta = metadata;
  const std::string& key = options.checksum_metadata_key;
  w->want_checksum_ = options.data_checksum;
  if (!key.empty()) {
    if (!options.data_checksum || meta.count(key) != 0 || json(key).dump() != "\"" + key + "\"") {
      return InvalidArgument("{}: checksum metadata key '{}' is unusable", path, key);
    }
    meta[key] = ChecksumHex(0);  // placeholder of the final length
  }
  const std::string header = BuildHeader(w->tensors_, w->sizes_, offsets, meta, alignment);
  if (!key.empty()) {
    // Where the placeholder's digits are: the pattern "key":"000..." can
    // only be that entry (a quote inside any other string is escaped).
    const std::string pattern = "\"" + key + "\":\"" + ChecksumHex(0) + "\"";
    const size_t at = header.find(pattern);
    if (at == std::string::npos) return Internal("{}: checksum placeholder not found", path);
    w->checksum_offset_ = 8 + at + key.size() + 4;
  }
  w->data_start_ = 8 + header.size();
  for (uint64_t& o : offsets) o += 8 + header.size();
  w->offsets_ = std::move(offsets);
  w->written_.assign(w->tensors_.size(), 0);
  // Zero-byte tensors have nothing to write: complete from the start.
  for (uint64_t bytes : w->sizes_) w->done_.push_back(bytes == 0);
  uint8_t len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<uint8_t>(n & 0xff);
  if (options.unique_temp) {
    DSV4_ASSIGN_OR_RETURN(w->fd_, OpenUniqueTemp(path, &w->temp_path_));
  } else {
    w->temp_path_ = TempPathFor(path);
    DSV4_ASSIGN_OR_RETURN(w->fd_, OpenTemp(w->temp_path_));
  }
  if (options.mode >= 0 && ::fchmod(w->fd_, static_cast<mode_t>(options.mode) & 07777) != 0) {
    return w->Fail(IoError("{}: chmod failed: {}", w->temp_path_, std::strerror(errno)));
  }
  DSV4_RETURN_IF_ERROR(w->Fail(WriteAll(w->fd_, len, 8, w->temp_path_)));
  DSV4_RETURN_IF_ERROR(w->Fail(WriteAll(w->fd_, header.data(), header.size(), w->temp_path_)));
  for (size_t i = 0; i < w->tensors_.size(); ++i) {
    if (w->tensors_[i].name.rfind("__pad.", 0) != 0 || alignment == 0) continue;
    const std::vector<uint8_t> zeros(w->sizes_[i], 0);
    DSV4_RETURN_IF_ERROR(w->Write(w->tensors_[i].name, zeros.data(), zeros.size()));
  }
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
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return Fail(InvalidArgument("{}: tensor '{}' was not declared", path_, name));
  }
  const size_t i = it->second;
  if (nbytes == 0) return Status::Ok();
  if (done_[i]) return Fail(InvalidArgument("{}: tensor '{}' is already complete", path_, name));
  if (nbytes > sizes_[i] - written_[i]) {
    return Fail(InvalidArgument("{}: tensor '{}': {} bytes written, more than its {} bytes", path_,
                                name, written_[i] + nbytes, sizes_[i]));
  }
  DSV4_RETURN_IF_ERROR(Fail(PwriteAll(fd_, data, nbytes, offsets_[i] + written_[i], temp_path_)));
  written_[i] += nbytes;
  done_[i] = written_[i] == sizes_[i];
  return Status::Ok();
}

Status SafetensorsWriter::Finish(const std::function<Status()>& before_publish) {
  if (failed_ || finished_) {
    return FailedPrecondition("{}: writer is {}", path_, failed_ ? "failed" : "finished");
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!done_[i]) {
      return Fail(FailedPrecondition("{}: tensor '{}' is incomplete ({} of {} bytes written)",
                                     path_, tensors_[i].name, written_[i], sizes_[i]));
    }
  }
  if (want_checksum_) {
    DSV4_ASSIGN_OR_RETURN(checksum_, ChecksumOfFile(fd_, data_start_, data_bytes_, temp_path_));
    if (checksum_offset_ != 0) {
      const std::string hex = ChecksumHex(checksum_);
      DSV4_RETURN_IF_ERROR(
          Fail(PwriteAll(fd_, hex.data(), hex.size(), checksum_offset_, temp_path_)));
    }
  }
  if (before_publish) DSV4_RETURN_IF_ERROR(Fail(before_publish()));
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

}  // namespace dsv4::checkpoint
