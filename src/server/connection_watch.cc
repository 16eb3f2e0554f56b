#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace dsv4::server {
namespace {

// "addr", port of a socket address (IPv4 or IPv6).
bool Describe(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

bool Matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage peer{}, self{};
  socklen_t peer_len = sizeof(peer), self_len = sizeof(self);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0) return false;
  std::string peer_addr, self_addr;
  int peer_port = 0, self_port = 0;
  if (!Describe(peer, &peer_addr, &peer_port) || !Describe(self, &self_addr, &self_port)) {
    return false;
  }
  return peer_port == remote_port && self_port == local_port && peer_addr == remote_addr &&
         self_addr == local_addr;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_addr, int local_port,
                                 const std::string& remote_addr, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int dir_fd = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == dir_fd) continue;
    if (Matches(fd, local_addr, local_port, remote_addr, remote_port)) {
      fd_ = fd;
      break;
    }
  }
  closedir(dir);
}

bool ConnectionWatch::PeerClosed() {
  if (fd_ < 0 || closed_) return closed_;
  char byte = 0;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    closed_ = true;  // orderly shutdown by the peer
  } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    closed_ = true;  // reset or another error: nobody will read the answer
  }
  return closed_;
}

}  // namespace dsv4::server
