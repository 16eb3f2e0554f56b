#include "dist/communicator.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace dsv4::dist {

Status Communicator::AllGather(const void* send, int64_t bytes, void* recv) {
  const std::vector<int64_t> counts(static_cast<size_t>(size()), bytes);
  return AllGatherV(send, recv, counts);
}

Status CheckCounts(std::span<const int64_t> counts, int size, const char* op) {
  if (counts.size() != static_cast<size_t>(size)) {
    return InvalidArgument("{}: {} counts for {} ranks", op, counts.size(), size);
  }
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0 || counts[r] > INT_MAX) {
      return InvalidArgument("{}: count {} for rank {} is outside [0, {}]", op, counts[r], r,
                             INT_MAX);
    }
  }
  return Status::Ok();
}

Status CheckRoot(int root, int size, const char* op) {
  if (root < 0 || root >= size) return InvalidArgument("{}: root {} of {} ranks", op, root, size);
  return Status::Ok();
}

Status LocalCommunicator::Broadcast(void*, int64_t bytes, int root) {
  if (bytes < 0) return InvalidArgument("broadcast: {} bytes", bytes);
  return CheckRoot(root, 1, "broadcast");
}

Status LocalCommunicator::BroadcastIdle(void* data, int64_t bytes, int root, double timeout_s) {
  if (timeout_s < 0) return InvalidArgument("idle broadcast: timeout {} s", timeout_s);
  return Broadcast(data, bytes, root);
}

Status LocalCommunicator::AllGatherV(const void* send, void* recv,
                                     std::span<const int64_t> counts) {
  DSV4_RETURN_IF_ERROR(CheckCounts(counts, 1, "all-gather"));
  if (counts[0] > 0 && recv != send) std::memmove(recv, send, static_cast<size_t>(counts[0]));
  ++stats_.calls;
  return Status::Ok();
}

Status LocalCommunicator::AllToAllV(const void* send, std::span<const int64_t> send_counts,
                                    void* recv, std::span<const int64_t> recv_counts) {
  DSV4_RETURN_IF_ERROR(CheckCounts(send_counts, 1, "all-to-all"));
  DSV4_RETURN_IF_ERROR(CheckCounts(recv_counts, 1, "all-to-all"));
  if (send_counts[0] != recv_counts[0]) {
    return InvalidArgument("all-to-all: rank 0 sends itself {} bytes but expects {}",
                           send_counts[0], recv_counts[0]);
  }
  if (send_counts[0] > 0 && recv != send) {
    std::memmove(recv, send, static_cast<size_t>(send_counts[0]));
  }
  ++stats_.calls;
  return Status::Ok();
}

void LocalCommunicator::Abort(const std::string& message, int code) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace dsv4::dist
