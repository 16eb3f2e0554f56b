// Run under mpirun by CTest (tests/dist/CMakeLists.txt): every collective of
// dist::Communicator with rank-dependent data, checked on every rank.  Exit 0
// when every check passed on this rank, 1 otherwise (mpirun then fails).
// `collectives_main timeout`: rank 1 never joins a barrier; rank 0 must abort
// the run after its 2 s timeout with one line naming the barrier.
// `collectives_main silent-root`: rank 0 never broadcasts; the others, idle
// with a 2 s deadline, must abort the run with one line naming rank 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "dist/session.h"

namespace dsv4::dist {
namespace {

int failures = 0;

void Expect(bool ok, const char* what, int rank) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: check failed: %s\n", rank, what);
  ++failures;
}

uint8_t Byte(int from, int to, int64_t i) { return static_cast<uint8_t>(from * 31 + to * 7 + i); }

void CheckAll(Communicator& c) {
  const int r = c.rank();
  const int n = c.size();
  Expect(StartedByMpirun() && HaveMpi() && n > 1, "an MPI world of several ranks", r);

  // Broadcast from every root, bounded and idle.
  for (int root = 0; root < n; ++root) {
    std::vector<int64_t> v(1000, r == root ? root + 1 : -1);
    Expect(c.Broadcast(v.data(), 8000, root).ok(), "broadcast returns ok", r);
    Expect(std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == root + 1; }),
           "broadcast delivers the root's data", r);
    int64_t x = r == root ? 42 : 0;
    Expect(c.BroadcastIdle(&x, 8, root, 30).ok() && x == 42, "idle broadcast", r);
    Expect(!c.BroadcastIdle(&x, 8, root, -1).ok(), "a negative idle timeout is refused", r);
  }

  // All-gather v: rank q contributes q + 3 bytes (0 for the last rank).
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) counts[static_cast<size_t>(q)] = q == n - 1 ? 0 : q + 3;
  std::vector<uint8_t> mine(static_cast<size_t>(counts[static_cast<size_t>(r)]));
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = Byte(r, 0, static_cast<int64_t>(i));
  std::vector<uint8_t> all(static_cast<size_t>(std::accumulate(counts.begin(), counts.end(), 0L)));
  Expect(c.AllGatherV(mine.data(), all.data(), counts).ok(), "all-gather v returns ok", r);
  size_t at = 0;
  for (int q = 0; q < n; ++q) {
    for (int64_t i = 0; i < counts[static_cast<size_t>(q)]; ++i) {
      Expect(all[at++] == Byte(q, 0, i), "all-gather v places rank q's bytes q-th", r);
    }
  }

  // All-to-all v: rank p sends p + q + 1 bytes to rank q.
  std::vector<int64_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
  std::vector<uint8_t> send, recv;
  for (int q = 0; q < n; ++q) {
    sc[static_cast<size_t>(q)] = r + q + 1;
    rc[static_cast<size_t>(q)] = q + r + 1;
    for (int64_t i = 0; i < r + q + 1; ++i) send.push_back(Byte(r, q, i));
  }
  recv.resize(static_cast<size_t>(std::accumulate(rc.begin(), rc.end(), 0L)));
  Expect(c.AllToAllV(send.data(), sc, recv.data(), rc).ok(), "all-to-all v returns ok", r);
  at = 0;
  for (int q = 0; q < n; ++q) {
    for (int64_t i = 0; i < q + r + 1; ++i) {
      Expect(recv[at++] == Byte(q, r, i), "all-to-all v delivers rank q's block for me", r);
    }
  }

  // Bad arguments are errors on the caller, before any communication.
  Expect(!c.Broadcast(nullptr, 8, n).ok(), "a root outside the world is refused", r);
  std::vector<int64_t> short_counts(static_cast<size_t>(n - 1), 0);
  Expect(!c.AllGatherV(nullptr, nullptr, short_counts).ok(), "wrong count list refused", r);

  Expect(c.Barrier().ok(), "barrier", r);
  Expect(c.stats().calls > 0 && c.stats().bytes_received > 0, "stats count the traffic", r);
}

int Main(int argc, char** argv) {
  auto session = Session::Start(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 1;
  }
  Communicator& c = (*session)->world();
  if (argc > 1 && std::strcmp(argv[1], "timeout") == 0) {
    c.set_timeout_s(2);
    if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
    (void)c.Barrier();
    std::fprintf(stderr, "rank %d: the barrier returned although rank 1 never joined\n", c.rank());
    return 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "silent-root") == 0) {
    if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(60));
    int64_t x = 0;
    (void)c.BroadcastIdle(&x, 8, 0, 2);
    std::fprintf(stderr, "rank %d: the idle broadcast returned although rank 0 never sent\n",
                 c.rank());
    return 1;
  }
  CheckAll(c);
  if (failures == 0 && c.rank() == 0) std::printf("collectives ok on %d ranks\n", c.size());
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace dsv4::dist

int main(int argc, char** argv) { return dsv4::dist::Main(argc, argv); }
