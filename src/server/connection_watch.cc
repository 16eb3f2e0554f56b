#include "server/connection_watch.h"

#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dsv4::server {
namespace {

// "127.0.0.1" -> the hex spelling of /proc/net/tcp ("0100007F": the address
// as a host-order u32, printed by the kernel on a little-endian machine).
std::string ProcHexIpv4(const std::string& dotted) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (std::sscanf(dotted.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) != 4) return "";
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%02X%02X%02X%02X", d, c, b, a);
  return buf;
}

// The inode of the TCP socket local:port <-> remote:port, from
// /proc/net/tcp (IPv4, addresses compared) or /proc/net/tcp6 (ports only).
// Reading the tables touches no descriptor of another thread.
std::string FindInode(const std::string& local_addr, int local_port, const std::string& remote_addr,
                      int remote_port) {
  const std::string local_hex = ProcHexIpv4(local_addr);
  const std::string remote_hex = ProcHexIpv4(remote_addr);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    const bool v4 = std::strcmp(table, "/proc/net/tcp") == 0;
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ss(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      if (!(ss >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
            inode)) {
        continue;
      }
      const size_t lc = local.find(':'), rc = remote.find(':');
      if (lc == std::string::npos || rc == std::string::npos) continue;
      if (std::strtol(local.c_str() + lc + 1, nullptr, 16) != local_port) continue;
      if (std::strtol(remote.c_str() + rc + 1, nullptr, 16) != remote_port) continue;
      if (v4 && (local.compare(0, lc, local_hex) != 0 || remote.compare(0, rc, remote_hex) != 0)) {
        continue;
      }
      return inode;
    }
  }
  return "";
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_addr, int local_port,
                                 const std::string& remote_addr, int remote_port) {
  const std::string inode = FindInode(local_addr, local_port, remote_addr, remote_port);
  if (inode.empty() || inode == "0") return;
  const std::string target = "socket:[" + inode + "]";
  // readlink on /proc/self/fd/N names the socket without operating on the
  // descriptor (other threads may be closing theirs meanwhile).
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char link[64] = {};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
    if (n > 0 && target == std::string(link, static_cast<size_t>(n))) {
      fd_ = std::atoi(e->d_name);
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

void ConnectionWatch::StopReading() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RD);
}

}  // namespace dsv4::server
