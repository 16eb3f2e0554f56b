#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dsv4::server {
namespace {

int Port(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (peer) {
    getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  } else {
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  }
  return ntohs(a.sin_port);
}

TEST(ConnectionWatch, FindsTheAcceptedSocketAndSeesTheClientLeave) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  addr.sin_port = htons(static_cast<uint16_t>(Port(listener, false)));
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);

  ConnectionWatch watch("127.0.0.1", Port(conn, false), "127.0.0.1", Port(conn, true));
  ASSERT_TRUE(watch.found());
  EXPECT_FALSE(watch.PeerClosed());
  ASSERT_EQ(write(client, "x", 1), 1);  // pending data is not a close
  EXPECT_FALSE(watch.PeerClosed());
  char byte = 0;
  ASSERT_EQ(read(conn, &byte, 1), 1);  // the server consumed the request
  close(client);
  EXPECT_TRUE(watch.PeerClosed());

  ConnectionWatch none("127.0.0.1", 1, "127.0.0.1", 2);
  EXPECT_FALSE(none.found());
  EXPECT_FALSE(none.PeerClosed());
  close(conn);
  close(listener);
}

}  // namespace
}  // namespace dsv4::server
