#include "base/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace dsv4 {
namespace {

const char* KindName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

Status StatError(const std::string& path, int err) {
  if (err == ENOENT || err == ENOTDIR) return NotFound("{}: no such file or directory", path);
  return IoError("{}: {}", path, DescribeErrno(err));
}

Status NotRegular(const std::string& path, mode_t mode) {
  return InvalidArgument("{}: is {}, expected a regular file", path, KindName(mode));
}

}  // namespace

std::string DescribeErrno(int err) {
  std::string s = std::strerror(err);
  if (err == ELOOP) s += " (a symlink loop?)";
  return s;
}

Result<int> OpenRegularFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return StatError(path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return StatError(path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotRegular(path, st.st_mode);
  }
  // Regular file: blocking reads from here on (O_NONBLOCK only guarded open).
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError("{}: fcntl failed: {}", path, DescribeErrno(err));
  }
  return fd;
}

Status CheckRegularFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return StatError(path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  return Status::Ok();
}

Status CheckDirectory(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotFound("{} {} does not exist", what, path);
    return IoError("{} {}: {}", what, path, DescribeErrno(err));
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("{} {} is not a directory", what, path);
  return Status::Ok();
}

Result<bool> PathExists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) return false;
  return IoError("{}: {}", path, DescribeErrno(err));
}

Result<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes) {
  DSV4_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError("{}: cannot stat: {}", path, DescribeErrno(err));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return InvalidArgument("{}: {} bytes, more than the {} this file may have", path, st.st_size,
                           max_bytes);
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return IoError("{}: read failed: {}", path, DescribeErrno(err));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {  // grew while we read
      ::close(fd);
      return InvalidArgument("{}: more than the {} bytes this file may have", path, max_bytes);
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string ReadPseudoFile(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

int64_t KibFieldBytes(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + key.size()) * 1024;
  }
  return 0;
}

}  // namespace dsv4
