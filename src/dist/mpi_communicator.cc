#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "base/clock.h"

namespace dsv4::dist {
namespace {

using Clock = std::chrono::steady_clock;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Broadcast(void* data, int64_t bytes, int root) override {
    return DoBroadcast(data, bytes, root, timeout_s_, false);
  }
  Status BroadcastIdle(void* data, int64_t bytes, int root, double timeout_s) override {
    if (timeout_s < 0) return InvalidArgument("idle broadcast: timeout {} s", timeout_s);
    return DoBroadcast(data, bytes, root, timeout_s, true);
  }

  Status AllGatherV(const void* send, void* recv, std::span<const int64_t> counts) override {
    DSV4_RETURN_IF_ERROR(CheckCounts(counts, size_, "all-gather"));
    std::vector<int> c(counts.size()), displ(counts.size());
    int64_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      c[r] = static_cast<int>(counts[r]);
      if (total > INT32_MAX) return InvalidArgument("all-gather: {} bytes in all", total);
      displ[r] = static_cast<int>(total);
      total += counts[r];
    }
    const auto t0 = Clock::now();
    MPI_Request req;
    // This rank's block already in place in recv: MPI_IN_PLACE (MPI forbids
    // overlapping send and receive buffers otherwise).
    const bool in_place = send == static_cast<const char*>(recv) + displ[Sz(rank_)];
    const int rc = MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, c[Sz(rank_)], MPI_BYTE, recv,
                                   c.data(), displ.data(), MPI_BYTE, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return Internal("MPI_Iallgatherv failed ({})", rc);
    Wait(&req, "all-gather", timeout_s_, -1);
    const int64_t mine = counts[Sz(rank_)];
    Account(t0, mine * (size_ - 1), total - mine);
    return Status::Ok();
  }

  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts) override {
    DSV4_RETURN_IF_ERROR(CheckCounts(send_counts, size_, "all-to-all"));
    DSV4_RETURN_IF_ERROR(CheckCounts(recv_counts, size_, "all-to-all"));
    std::vector<int> sc(Sz(size_)), sd(Sz(size_)), rc(Sz(size_)), rd(Sz(size_));
    int64_t st = 0, rt = 0;
    for (size_t r = 0; r < Sz(size_); ++r) {
      if (st > INT32_MAX || rt > INT32_MAX) return InvalidArgument("all-to-all: too many bytes");
      sc[r] = static_cast<int>(send_counts[r]);
      sd[r] = static_cast<int>(st);
      rc[r] = static_cast<int>(recv_counts[r]);
      rd[r] = static_cast<int>(rt);
      st += send_counts[r];
      rt += recv_counts[r];
    }
    const auto t0 = Clock::now();
    MPI_Request req;
    const int err = MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(),
                                   MPI_BYTE, MPI_COMM_WORLD, &req);
    if (err != MPI_SUCCESS) return Internal("MPI_Ialltoallv failed ({})", err);
    Wait(&req, "all-to-all", timeout_s_, -1);
    Account(t0, st - send_counts[Sz(rank_)], rt - recv_counts[Sz(rank_)]);
    return Status::Ok();
  }

  Status Barrier() override {
    const auto t0 = Clock::now();
    MPI_Request req;
    const int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return Internal("MPI_Ibarrier failed ({})", rc);
    Wait(&req, "barrier", timeout_s_, -1);
    Account(t0, 0, 0);
    return Status::Ok();
  }

  [[noreturn]] void Abort(const std::string& message, int code) override {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 private:
  static size_t Sz(int64_t v) { return static_cast<size_t>(v); }

  Status DoBroadcast(void* data, int64_t bytes, int root, double timeout_s, bool idle) {
    DSV4_RETURN_IF_ERROR(CheckRoot(root, size_, "broadcast"));
    if (bytes < 0 || bytes > INT32_MAX) return InvalidArgument("broadcast: {} bytes", bytes);
    const auto t0 = Clock::now();
    MPI_Request req;
    const int rc = MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return Internal("MPI_Ibcast failed ({})", rc);
    Wait(&req, "broadcast", timeout_s, idle && rank_ != root ? root : -1);
    if (!idle) {
      Account(t0, rank_ == root ? bytes * (size_ - 1) : 0, rank_ == root ? 0 : bytes);
    }
    return Status::Ok();
  }

  // Completes `req`.  Yields for the first 2 ms (an exchange between busy
  // ranks ends in microseconds), then sleeps 100 us per poll (1 ms while
  // idling for `silent_root`, >= 0 on an idle wait for another rank); past
  // timeout_s (0 = forever) it aborts every rank, naming the silent root
  // when there is one.
  void Wait(MPI_Request* req, const char* op, double timeout_s, int silent_root) {
    const auto t0 = Clock::now();
    for (;;) {
      int done = 0;
      MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (done != 0) return;
      const double waited = SecondsSince(t0);
      if (timeout_s > 0 && waited > timeout_s) {
        Abort(
            silent_root >= 0
                ? fmt::format("dsv4: rank {} of {}: no message from rank {} for {:.0f} s (rank {} "
                              "died or hangs); stopping every rank",
                              rank_, size_, silent_root, waited, silent_root)
                : fmt::format("dsv4: rank {} of {}: {} waited {:.0f} s for the other ranks (a "
                              "rank died or hangs); stopping every rank",
                              rank_, size_, op, waited),
            1);
      }
      if (waited < 2e-3) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(silent_root >= 0 ? 1000 : 100));
      }
    }
  }

  void Account(Clock::time_point t0, int64_t sent, int64_t received) {
    ++stats_.calls;
    stats_.bytes_sent += sent;
    stats_.bytes_received += received;
    stats_.seconds += SecondsSince(t0);
  }

  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> NewMpiWorldCommunicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace dsv4::dist
