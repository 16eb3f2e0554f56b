#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/file_util.h"

namespace dsv4 {

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  // Never blocks (a FIFO in place of a shard is refused, not waited on).
  DSV4_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return IoError("{}: cannot stat: {}", path, std::strerror(err));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return IoError("{}: mmap failed: {}", path, std::strerror(err));
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

Result<std::unique_ptr<MappedFile>> MappedFile::MapShared(int fd, size_t size, std::string path) {
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return IoError("{}: mmap failed: {}", path, std::strerror(errno));
    data = static_cast<const uint8_t*>(p);
  }
  return std::unique_ptr<MappedFile>(new MappedFile(std::move(path), data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::string> ReadFileToString(const std::string& path) { return ReadRegularFile(path); }

}  // namespace dsv4
