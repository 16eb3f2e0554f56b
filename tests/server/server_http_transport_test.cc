// The HTTP transport against hostile and unusual clients, over raw sockets
// (docs/server.md "Transport"): trickling and oversized headers, header and
// body deadlines (408), a second server on a busy port, pipelining, malformed
// framing, the connection cap, and shutdown with clients that never finish
// their request.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <future>

#include "server_fixture.h"

namespace dsv4::server::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << errno;
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until `done(text)` or the peer closes or `timeout`; `closed` tells
// whether the server ended the connection (EOF or reset).
struct Read {
  std::string text;
  bool closed = false;
};
Read ReadUntil(int fd, milliseconds timeout, const std::function<bool(const std::string&)>& done) {
  Read r;
  const auto deadline = SteadyClock::now() + timeout;
  char buf[16384];
  while (!done(r.text)) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      r.closed = true;
      break;
    }
    r.text.append(buf, static_cast<size_t>(n));
  }
  return r;
}
Read ReadUntilClosed(int fd, milliseconds timeout) {
  return ReadUntil(fd, timeout, [](const std::string&) { return false; });
}

// Complete Content-Length responses at the start of `text`.
int CountResponses(const std::string& text) {
  int count = 0;
  size_t pos = 0;
  for (;;) {
    const size_t end = text.find("\r\n\r\n", pos);
    if (end == std::string::npos) return count;
    const size_t cl = text.find("Content-Length: ", pos);
    if (cl == std::string::npos || cl > end) return count;
    const size_t length = std::stoul(text.substr(cl + 16));
    if (text.size() < end + 4 + length) return count;
    pos = end + 4 + length;
    ++count;
  }
}

std::vector<std::string> ResponseBodies(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (out.size() < static_cast<size_t>(CountResponses(text))) {
    const size_t end = text.find("\r\n\r\n", pos);
    const size_t length = std::stoul(text.substr(text.find("Content-Length: ", pos) + 16));
    out.push_back(text.substr(end + 4, length));
    pos = end + 4 + length;
  }
  return out;
}

double RssMiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

const char* kShortChat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})";

// Issue 1: 200 sockets trickling a header byte by byte held /health and
// chat hostage (one thread per connection, no header deadline).  Now they
// cost no thread, probes and chat are answered at once, and the header
// deadline disconnects them although they keep sending.
TEST(ServerHttpTransport, TricklingClientsHoldNothingAndAreCutAtTheHeaderDeadline) {
  ServerOptions so;
  so.max_concurrent_requests = 64;
  so.num_http_threads = 72;
  so.header_timeout_seconds = 1.5;
  TestServer srv(so);
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    fds.push_back(Connect(srv.port()));
    ASSERT_TRUE(SendAll(fds.back(), "G"));
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string header = "ET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    for (size_t i = 0; !stop; ++i) {
      for (int fd : fds) {
        const char c = i < header.size() ? header[i] : 'a';
        (void)send(fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto t0 = SteadyClock::now();
  auto h = srv.Client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  const auto [status, body] = srv.Post("/v1/chat/completions", kShortChat);
  EXPECT_EQ(status, 200) << body;
  EXPECT_LT(SecondsSince(t0), 1.0);
  // Every trickler is answered 408 at its header deadline (1.5 s after its
  // first byte) and disconnected, not left to hold its connection.
  int closed = 0;
  int timed_out = 0;
  for (int fd : fds) {
    const Read r = ReadUntilClosed(fd, milliseconds(5000));
    closed += r.closed ? 1 : 0;
    timed_out += r.text.rfind("HTTP/1.1 408", 0) == 0 ? 1 : 0;
  }
  stop = true;
  trickle.join();
  EXPECT_EQ(closed, 200);
  EXPECT_EQ(timed_out, 200);
  EXPECT_LT(SecondsSince(t0), 6.0);
  for (int fd : fds) close(fd);
}

// A header not complete at its deadline is answered 408 in OpenAI's error
// shape, then the connection ends (it used to be closed without a word).
TEST(ServerHttpTransport, HeaderDeadlineIs408ThenClose) {
  ServerOptions so;
  so.header_timeout_seconds = 0.5;
  TestServer srv(so);
  const int fd = Connect(srv.port());
  const auto t0 = SteadyClock::now();
  ASSERT_TRUE(SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le"));
  const Read r = ReadUntilClosed(fd, milliseconds(5000));
  const double took = SecondsSince(t0);
  EXPECT_EQ(r.text.rfind("HTTP/1.1 408", 0), 0u) << r.text;
  EXPECT_NE(r.text.find("Connection: close"), std::string::npos) << r.text;
  ASSERT_EQ(CountResponses(r.text), 1) << r.text;
  const Json error = Json::parse(ResponseBodies(r.text)[0])["error"];
  EXPECT_EQ(error["message"], "request header not complete within 0.5 s (--header-timeout)");
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["code"], "request_timeout");
  EXPECT_TRUE(r.closed);
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 0.5 + 2.0);
  close(fd);
  EXPECT_EQ(srv.Client().Get("/health")->status, 200);
}

// A body sent one byte at a time, each wait well under --read-timeout, held
// its connection for as long as the client kept going (a 1000-byte body at
// 4 bytes/s: 250 s).  The whole body now has --body-timeout from the end of
// the header; past it the request is answered 408 and the connection ends.
TEST(ServerHttpTransport, SteadilyTrickledBodyIsCutAtTheBodyDeadline) {
  ServerOptions so;
  so.read_timeout_seconds = 1;
  so.body_timeout_seconds = 1.5;
  TestServer srv(so);
  // A body that arrives in pieces within its deadline is served.
  const std::string body = R"({"prompt":[5,6,7],"max_tokens":2})";
  int fd = Connect(srv.port());
  ASSERT_TRUE(SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n"));
  for (size_t off = 0; off < body.size(); off += 12) {
    std::this_thread::sleep_for(milliseconds(200));
    ASSERT_TRUE(SendAll(fd, body.substr(off, 12)));
  }
  Read r = ReadUntil(fd, milliseconds(5000),
                     [](const std::string& t) { return CountResponses(t) == 1; });
  EXPECT_EQ(r.text.rfind("HTTP/1.1 200", 0), 0u) << r.text;
  close(fd);

  fd = Connect(srv.port());
  const auto t0 = SteadyClock::now();
  ASSERT_TRUE(
      SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"));
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      std::this_thread::sleep_for(milliseconds(250));
      (void)send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  });
  r = ReadUntil(fd, milliseconds(6000),
                [](const std::string& t) { return CountResponses(t) == 1; });
  const double answered = SecondsSince(t0);
  const bool closed = ReadUntilClosed(fd, milliseconds(3000)).closed;
  stop = true;
  trickle.join();
  EXPECT_EQ(r.text.rfind("HTTP/1.1 408", 0), 0u) << r.text;
  ASSERT_EQ(CountResponses(r.text), 1) << r.text;
  EXPECT_EQ(Json::parse(ResponseBodies(r.text)[0])["error"]["message"],
            "request body not complete within 1.5 s (--body-timeout)");
  EXPECT_GE(answered, 1.45);
  EXPECT_LT(answered, 1.5 + 1.5);
  EXPECT_TRUE(closed);  // although the client keeps sending
  close(fd);
  EXPECT_EQ(srv.Client().Get("/health")->status, 200);
  EXPECT_EQ(srv.engine().Stats().generation_tokens_total, 2);  // the trickled one never ran
}

// A body that stops arriving is answered 408 at the read timeout.
TEST(ServerHttpTransport, SilentBodyIs408AtTheReadTimeout) {
  ServerOptions so;
  so.read_timeout_seconds = 0.5;
  TestServer srv(so);
  const int fd = Connect(srv.port());
  const auto t0 = SteadyClock::now();
  ASSERT_TRUE(
      SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"));
  const Read r = ReadUntilClosed(fd, milliseconds(5000));
  const double took = SecondsSince(t0);
  EXPECT_EQ(r.text.rfind("HTTP/1.1 408", 0), 0u) << r.text;
  ASSERT_EQ(CountResponses(r.text), 1) << r.text;
  EXPECT_EQ(Json::parse(ResponseBodies(r.text)[0])["error"]["message"],
            "no request body bytes for 0.5 s (--read-timeout)");
  EXPECT_TRUE(r.closed);
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 0.5 + 2.0);
  close(fd);
}

// At the connection limit the oldest connection without a request in
// progress makes room: idle clients cannot lock out a probe.
TEST(ServerHttpTransport, ConnectionCapEvictsTheOldestIdleConnection) {
  ServerOptions so;
  so.max_connections = 8;
  TestServer srv(so);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(Connect(srv.port()));
  std::this_thread::sleep_for(milliseconds(100));  // all accepted
  for (int round = 0; round < 3; ++round) {
    auto h = srv.Client().Get("/health");
    ASSERT_TRUE(h) << round;
    EXPECT_EQ(h->status, 200);
  }
  EXPECT_TRUE(ReadUntilClosed(idle[0], milliseconds(2000)).closed);
  for (int fd : idle) close(fd);
}

// Issue 2: a 64 MiB header line was buffered whole (+130 MiB RSS) before any
// check.  Now the parser stops at --max-header-bytes and answers 431.
TEST(ServerHttpTransport, HugeHeaderIs431AndIsNotBuffered) {
  TestServer srv;
  ASSERT_TRUE(srv.Client().Get("/health"));  // warm up the server's threads
  const double rss0 = RssMiB();
  const int fd = Connect(srv.port());
  ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: "));
  const std::string piece(64 << 10, 'a');
  size_t sent = 0;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  // Send until the answer arrives, the server closes, or 64 MiB are out.
  while (sent < (64u << 20)) {
    pollfd p{fd, POLLIN | POLLOUT, 0};
    if (poll(&p, 1, 5000) <= 0) break;
    if (p.revents & (POLLIN | POLLERR | POLLHUP)) break;
    const ssize_t n = send(fd, piece.data(), piece.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const Read r = ReadUntil(fd, milliseconds(5000),
                           [](const std::string& t) { return CountResponses(t) == 1; });
  EXPECT_EQ(r.text.rfind("HTTP/1.1 431", 0), 0u) << r.text.substr(0, 200) << " sent " << sent;
  EXPECT_NE(r.text.find("request header over 32768 bytes"), std::string::npos);
  EXPECT_NE(r.text.find("Connection: close"), std::string::npos);
  EXPECT_LT(RssMiB() - rss0, 16.0) << "sent " << sent;
  close(fd);
  EXPECT_EQ(srv.Client().Get("/health")->status, 200);
}

// Issue 3: a second server on a busy port started silently (SO_REUSEPORT)
// and took part of the traffic.
TEST(ServerHttpTransport, SecondServerOnABusyPortFailsToBind) {
  TestServer first;
  FakeEngine engine;
  ServerOptions so;
  so.port = first.port();
  OpenAiServer second(engine, V4Tokenizer(), so);
  const Status s = second.Bind();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot bind 127.0.0.1:" + std::to_string(first.port())),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("in use"), std::string::npos) << s.message();
  EXPECT_EQ(first.Client().Get("/health")->status, 200);
}

// Issue 4: requests pipelined after the first on one connection got no
// answer.  Now each is answered, in order, and the connection stays open.
TEST(ServerHttpTransport, PipelinedRequestsAreAnsweredInOrder) {
  TestServer srv;
  const std::string completion = R"({"prompt":[5,6,7],"max_tokens":3})";
  const std::string requests =
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(completion.size()) + "\r\n\r\n" + completion +
      "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 19\r\n\r\n{\"prompt\":\"Hello!\"}";
  const int fd = Connect(srv.port());
  ASSERT_TRUE(SendAll(fd, requests));
  Read r = ReadUntil(fd, milliseconds(10000),
                     [](const std::string& t) { return CountResponses(t) == 4; });
  ASSERT_EQ(CountResponses(r.text), 4) << r.text;
  const std::vector<std::string> bodies = ResponseBodies(r.text);
  EXPECT_EQ(bodies[0], R"({"status":"ok"})");
  EXPECT_EQ(Json::parse(bodies[1])["choices"][0]["text"], Decode(FakeOutput({5, 6, 7}, 3)));
  EXPECT_EQ(Json::parse(bodies[2])["object"], "list");
  EXPECT_EQ(Json::parse(bodies[3])["tokens"].get<std::vector<int32_t>>(),
            V4Tokenizer().Encode("Hello!"));
  EXPECT_FALSE(r.closed);
  // Keep-alive: the same connection serves one more.
  ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  r = ReadUntil(fd, milliseconds(5000),
                [](const std::string& t) { return CountResponses(t) == 1; });
  EXPECT_EQ(r.text.rfind("HTTP/1.1 200", 0), 0u) << r.text;
  // HTTP/1.0 without keep-alive: answered, then closed.
  ASSERT_TRUE(SendAll(fd, "GET /health HTTP/1.0\r\n\r\n"));
  r = ReadUntilClosed(fd, milliseconds(5000));
  EXPECT_EQ(CountResponses(r.text), 1) << r.text;
  EXPECT_TRUE(r.closed);
  close(fd);
}

// Issue 5: a malformed Content-Length held the connection for 60 s.
TEST(ServerHttpTransport, MalformedFramingIs400AtOnceAndCloses) {
  TestServer srv;
  for (const char* framing :
       {"Content-Length: abc\r\n", "Content-Length: -5\r\n", "Content-Length: 5, 6\r\n",
        "Content-Length: 3\r\nContent-Length: 4\r\n",
        "Content-Length: 99999999999999999999999\r\n"}) {
    const int fd = Connect(srv.port());
    const auto t0 = SteadyClock::now();
    ASSERT_TRUE(SendAll(
        fd, std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\n") + framing + "\r\n"));
    const Read r = ReadUntilClosed(fd, milliseconds(5000));
    EXPECT_EQ(r.text.rfind("HTTP/1.1 400", 0), 0u) << framing << r.text;
    EXPECT_NE(r.text.find("malformed request"), std::string::npos) << r.text;
    EXPECT_TRUE(r.closed) << framing;
    EXPECT_LT(SecondsSince(t0), 2.0) << framing;
    close(fd);
  }
  // A body over the limit declared up front is refused before it is sent.
  ServerOptions so;
  so.max_body_bytes = 64 << 10;
  TestServer small(so);
  const int fd = Connect(small.port());
  ASSERT_TRUE(
      SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"));
  const Read r = ReadUntil(fd, milliseconds(5000),
                           [](const std::string& t) { return CountResponses(t) == 1; });
  EXPECT_EQ(r.text.rfind("HTTP/1.1 413", 0), 0u) << r.text;
  EXPECT_NE(r.text.find("request body over 65536 bytes"), std::string::npos) << r.text;
  close(fd);
}

// Issue 6: a form-encoded body over 8 KiB got a false 413 (cpp-httplib's form
// limit).  The content type does not matter: the body is JSON or a 400.
TEST(ServerHttpTransport, FormEncodedBodyOver8KiBIsNot413) {
  TestServer srv;
  const std::string body = R"({"prompt":")" + std::string(16 << 10, 'a') + R"(","max_tokens":1})";
  TestClient c = srv.Client();
  auto r = c.Post("/v1/completions", body, "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body.substr(0, 300);
  r = c.Post("/v1/completions", "a=" + std::string(16 << 10, 'b'),
             "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body.substr(0, 300);
}

// Issue 7a: a client trickling a header kept the process from exiting after
// SIGTERM; a half-sent header delayed it to 60 s.  Stop closes idle and
// mid-header connections at once.
TEST(ServerHttpTransport, StopClosesIdleAndMidHeaderConnectionsAtOnce) {
  auto srv = std::make_unique<TestServer>();
  const int idle = Connect(srv->port());
  const int half = Connect(srv->port());
  ASSERT_TRUE(SendAll(half, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le"));
  const int mid_body = Connect(srv->port());
  ASSERT_TRUE(SendAll(mid_body,
                      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"));
  const int trickler = Connect(srv->port());
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      (void)send(trickler, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto t0 = SteadyClock::now();
  srv->Stop(milliseconds(30000));
  EXPECT_LT(SecondsSince(t0), 1.5);
  for (int fd : {idle, half, mid_body, trickler}) {
    EXPECT_TRUE(ReadUntilClosed(fd, milliseconds(2000)).closed);
  }
  stop = true;
  trickle.join();
  for (int fd : {idle, half, mid_body, trickler}) close(fd);
}

// Issue 7b: with a request in flight and a half-sent header, Stop keeps to
// the drain time (plus the abort grace), and the request in flight is
// answered (finish_reason "abort").
TEST(ServerHttpTransport, StopKeepsToTheDrainTimeWhateverClientsDo) {
  FakeEngineOptions eo;
  eo.step_time = milliseconds(5);
  auto srv = std::make_unique<TestServer>(ServerOptions{}, eo);
  auto long_req = std::async(std::launch::async, [&] {
    return srv->Post("/v1/completions", R"({"prompt":"y","max_tokens":3000})");
  });
  while (srv->server().num_in_flight() < 1) std::this_thread::sleep_for(milliseconds(1));
  const int half = Connect(srv->port());
  ASSERT_TRUE(SendAll(half, "GET /health HTTP/1.1\r\nHo"));
  const auto t0 = SteadyClock::now();
  srv->Stop(milliseconds(500));
  const double took = SecondsSince(t0);
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 0.5 + 2.0);
  const auto [status, body] = long_req.get();
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(Json::parse(body)["choices"][0]["finish_reason"], "abort");
  EXPECT_TRUE(ReadUntilClosed(half, milliseconds(1000)).closed);
  close(half);
}

// Issue 7c: `--shutdown-timeout inf` aborted requests in flight at once; an
// unlimited drain waits for them, and streams keep streaming meanwhile.
TEST(ServerHttpTransport, UnlimitedDrainLetsRequestsInFlightFinish) {
  FakeEngineOptions eo;
  eo.step_time = milliseconds(10);
  auto srv = std::make_unique<TestServer>(ServerOptions{}, eo);
  auto whole = std::async(std::launch::async, [&] {
    return srv->Post("/v1/completions", R"({"prompt":"y","max_tokens":120})");
  });
  auto stream = std::async(std::launch::async, [&] {
    return srv->Post("/v1/completions", R"({"prompt":"z","max_tokens":120,"stream":true})");
  });
  while (srv->server().num_in_flight() < 2) std::this_thread::sleep_for(milliseconds(1));
  const auto t0 = SteadyClock::now();
  srv->Stop(milliseconds::max());
  EXPECT_GE(SecondsSince(t0), 0.5);  // 120 steps of 10 ms, shared by two requests
  const auto [s1, b1] = whole.get();
  ASSERT_EQ(s1, 200) << b1;
  EXPECT_EQ(Json::parse(b1)["choices"][0]["finish_reason"], "length");
  const auto [s2, b2] = stream.get();
  ASSERT_EQ(s2, 200) << b2;
  const std::vector<Json> ev = SseEvents(b2);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "length");
}

// The owned socket tells a client that left: a streaming client that closes
// while the stream is idle (the engine paused) is noticed at the next
// keepalive, without waiting for a token.
TEST(ServerHttpTransport, IdleStreamNoticesAClosedClient) {
  ServerOptions so;
  so.keepalive_seconds = 0.05;
  TestServer srv(so);
  const std::string body = R"({"prompt":"x","max_tokens":50,"stream":true})";
  const int fd = Connect(srv.port());
  srv.engine().set_paused(true);
  ASSERT_TRUE(SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body));
  const Read r = ReadUntil(fd, milliseconds(5000), [](const std::string& t) {
    return t.find(": keepalive") != std::string::npos;
  });
  EXPECT_NE(r.text.find("Transfer-Encoding: chunked"), std::string::npos) << r.text;
  close(fd);
  // The engine is paused, so the abort is applied when it resumes: had the
  // handler not noticed the close, the request would run its 50 tokens.
  std::this_thread::sleep_for(milliseconds(300));
  srv.engine().set_paused(false);
  const auto deadline = SteadyClock::now() + seconds(5);
  while (srv.engine().num_aborted() == 0 && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(srv.engine().num_aborted(), 1);
  EXPECT_LE(srv.engine().Stats().generation_tokens_total, 1);
}

}  // namespace
}  // namespace dsv4::server::testing
