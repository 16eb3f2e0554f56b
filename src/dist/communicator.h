// The ranks of a multi-process run and the collectives dsv4 needs between
// them (docs/scale-out.md): broadcast, all-gather(v), all-to-all(v), barrier,
// abort.  Two implementations: LocalCommunicator (one process, rank 0 of 1:
// every collective is a copy or nothing) and, when the build found MPI and
// the process was started by mpirun, the MPI one (dist/session.h).
//
// Every rank calls the same collectives in the same order with matching
// sizes; a collective that waits longer than timeout_s() for the other ranks
// means a rank died or hangs, and the implementation aborts every rank with
// one line naming the operation (no silent hang).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace dsv4::dist {

// What this rank's collectives moved and waited for since the start (or the
// last ResetStats): the measurement behind docs/scale-out.md.
struct CommStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;      // payload this rank contributed to other ranks
  int64_t bytes_received = 0;  // payload this rank received from other ranks
  double seconds = 0;          // wall time inside collectives (transfer + waiting)
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Root's `bytes` bytes at `data` land in every rank's `data`.
  virtual Status Broadcast(void* data, int64_t bytes, int root) = 0;
  // The same for a rank idling until the root has work for it: waits up to
  // `timeout_s` (0 = forever) instead of timeout_s(), and past it a rank
  // other than the root aborts every rank with one line saying the root
  // stopped talking (the root keeps idle ranks waiting with keep-alive
  // broadcasts shorter than that; launch/ranks.cc).  Not counted in stats():
  // idle waiting is not communication.
  virtual Status BroadcastIdle(void* data, int64_t bytes, int root, double timeout_s) = 0;
  // Rank r contributes counts[r] bytes (`send`); `recv` receives every
  // rank's contribution, rank after rank (sum of counts bytes).  `send` may
  // be this rank's own block inside `recv` (in place); no other overlap.
  virtual Status AllGatherV(const void* send, void* recv, std::span<const int64_t> counts) = 0;
  // `send` holds send_counts[r] bytes for rank r, rank after rank; `recv`
  // receives recv_counts[r] bytes from rank r, rank after rank.  Each
  // send_counts[r] must equal rank r's recv_counts[this rank].
  virtual Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                           std::span<const int64_t> recv_counts) = 0;
  virtual Status Barrier() = 0;
  // Ends every rank of the run: `message` (one line) on this rank's stderr,
  // then exit status `code` everywhere.
  [[noreturn]] virtual void Abort(const std::string& message, int code) = 0;

  // Every rank contributes `bytes` bytes: AllGatherV with equal counts.
  Status AllGather(const void* send, int64_t bytes, void* recv);

  // Seconds a bounded collective waits before it aborts the run; 0 = forever.
  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double seconds) { timeout_s_ = seconds; }

  const CommStats& stats() const { return stats_; }
  void ResetStats() { stats_ = CommStats(); }

 protected:
  CommStats stats_;
  double timeout_s_ = 60;
};

// One process: rank 0 of 1.  Collectives copy `send` to `recv` or do nothing.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status Broadcast(void* data, int64_t bytes, int root) override;
  Status BroadcastIdle(void* data, int64_t bytes, int root, double timeout_s) override;
  Status AllGatherV(const void* send, void* recv, std::span<const int64_t> counts) override;
  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts) override;
  Status Barrier() override { return Status::Ok(); }
  [[noreturn]] void Abort(const std::string& message, int code) override;
};

// InvalidArgument unless counts has one entry per rank, each in
// [0, INT32_MAX] (MPI counts are int) and root lies in [0, size).
Status CheckCounts(std::span<const int64_t> counts, int size, const char* op);
Status CheckRoot(int root, int size, const char* op);

}  // namespace dsv4::dist
