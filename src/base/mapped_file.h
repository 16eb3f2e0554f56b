// Read-only memory mapping of a whole file (architecture decision 8: weights
// are zero-copy views into the mapped safetensors files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace dsv4 {

class MappedFile {
 public:
  // Maps `path` read-only.  An empty file maps to size() == 0, data() == nullptr.
  // Anything but a regular file (FIFO, device, directory) is an error, found
  // without blocking (base/file_util.h).
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  // Maps the first `size` bytes of the open file `fd` MAP_SHARED | PROT_READ:
  // the pages are the page cache's own (no copy-on-write state, shared with
  // every process mapping the file).  `fd` stays owned by the caller; the
  // mapping outlives it.  `path` names the file in messages.  size 0 maps
  // nothing.
  static Result<std::unique_ptr<MappedFile>> MapShared(int fd, size_t size, std::string path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Reads a whole (small) regular file into a string (base/file_util.h
// ReadRegularFile: never blocks on a FIFO, refuses files above 1 GiB).
Result<std::string> ReadFileToString(const std::string& path);

}  // namespace dsv4
