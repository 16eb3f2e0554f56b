// Notices a client that went away while its request is still generating.
//
// cpp-httplib 0.11 gives handlers no access to the connection's socket, and a
// write to a closed TCP connection still succeeds once (the peer's RST comes
// back after it), so write failures alone notice a disconnect one or more
// steps late and never for non-streaming requests.  ConnectionWatch finds the
// accepted socket by its address pair (unique while the connection is open,
// and the handler runs only while it is): the pair's inode from
// /proc/net/tcp{,6}, then the descriptor whose /proc/self/fd link names that
// inode — without touching other threads' descriptors.  It then peeks the
// socket: an orderly close (recv == 0) or a reset means the client is gone.
// Linux only; elsewhere found() is false and write failures remain.
#pragma once

#include <string>

namespace dsv4::server {

class ConnectionWatch {
 public:
  ConnectionWatch() = default;
  // Looks up the socket of the connection local_addr:local_port <->
  // remote_addr:remote_port.  When none matches, PeerClosed() is always false.
  ConnectionWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                  int remote_port);

  // True once the client closed or reset the connection.  Never blocks and
  // never consumes data.
  bool PeerClosed();
  bool found() const { return fd_ >= 0; }
  // shutdown(SHUT_RD): for a response sent without reading the whole body.
  // httplib then reads end-of-stream instead of taking the unread body for
  // the next request, and closes the connection after the response.
  void StopReading();

 private:
  int fd_ = -1;
  bool closed_ = false;
};

}  // namespace dsv4::server
