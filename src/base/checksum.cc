#include "base/checksum.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <system_error>
#include <thread>

#include "base/file_util.h"
#include "base/mutex.h"

namespace dsv4 {
namespace {

uint64_t Combine(const std::vector<uint64_t>& digests) {
  std::vector<uint8_t> bytes(digests.size() * 8);
  for (size_t i = 0; i < digests.size(); ++i) {
    for (int b = 0; b < 8; ++b) bytes[i * 8 + b] = static_cast<uint8_t>(digests[i] >> (8 * b));
  }
  return XXH3_64bits(bytes.data(), bytes.size());
}

XXH3_state_t* State(void* p) { return static_cast<XXH3_state_t*>(p); }

}  // namespace

ChunkedChecksum::ChunkedChecksum() : state_(XXH3_createState()) {
  XXH3_64bits_reset(State(state_));
}

ChunkedChecksum::~ChunkedChecksum() { XXH3_freeState(State(state_)); }

void ChunkedChecksum::Update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, kChecksumChunkBytes - in_chunk_));
    XXH3_64bits_update(State(state_), p, take);
    in_chunk_ += take;
    p += take;
    n -= take;
    if (in_chunk_ == kChecksumChunkBytes) {
      digests_.push_back(XXH3_64bits_digest(State(state_)));
      XXH3_64bits_reset(State(state_));
      in_chunk_ = 0;
    }
  }
}

uint64_t ChunkedChecksum::Finish() {
  if (in_chunk_ > 0) digests_.push_back(XXH3_64bits_digest(State(state_)));
  in_chunk_ = 0;
  return Combine(digests_);
}

namespace {

// Runs chunk(i) for i in [0, num_chunks) on up to `threads` threads (the
// caller included); chunks are claimed, so a thread the OS refuses only
// means fewer threads.  Stops claiming after the first error.
Status ForEachChunk(size_t num_chunks, int threads, const std::function<Status(size_t)>& chunk) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  Mutex mu;
  Status first;  // guarded by mu (a local: the analysis checks only members)
  auto work = [&] {
    for (size_t i = next++; i < num_chunks && !failed; i = next++) {
      Status s = chunk(i);
      if (!s.ok()) {
        MutexLock lock(&mu);
        if (!failed.exchange(true)) first = s;
      }
    }
  };
  std::vector<std::thread> helpers;
  const size_t want = std::min<size_t>(num_chunks, static_cast<size_t>(std::max(threads, 1)));
  for (size_t t = 1; t < want; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& t : helpers) t.join();
  return first;
}

size_t NumChunks(uint64_t n) {
  return static_cast<size_t>((n + kChecksumChunkBytes - 1) / kChecksumChunkBytes);
}

}  // namespace

uint64_t ChecksumOf(const uint8_t* data, size_t n, int threads) {
  std::vector<uint64_t> digests(NumChunks(n));
  const Status s = ForEachChunk(digests.size(), threads, [&](size_t i) {
    const size_t begin = i * kChecksumChunkBytes;
    digests[i] = XXH3_64bits(data + begin, std::min<size_t>(kChecksumChunkBytes, n - begin));
    return Status::Ok();
  });
  (void)s;  // the chunk function cannot fail
  return Combine(digests);
}

Result<uint64_t> ChecksumOfFile(int fd, uint64_t offset, uint64_t length, const std::string& path,
                                int threads, Progress* progress) {
  std::vector<uint64_t> digests(NumChunks(length));
  DSV4_RETURN_IF_ERROR(ForEachChunk(digests.size(), threads, [&](size_t i) -> Status {
    const uint64_t begin = i * kChecksumChunkBytes;
    uint64_t left = std::min<uint64_t>(kChecksumChunkBytes, length - begin);
    uint64_t at = offset + begin;
    std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(left, 8ull << 20)));
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    while (left > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
      const ssize_t r = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        XXH3_freeState(st);
        if (r < 0) return IoError("{}: read failed: {}", path, DescribeErrno(errno));
        return DataLoss("{}: file ends {} bytes early", path, length - (at - offset));
      }
      XXH3_64bits_update(st, buf.data(), static_cast<size_t>(r));
      if (progress != nullptr) progress->Add(r);
      at += static_cast<uint64_t>(r);
      left -= static_cast<uint64_t>(r);
    }
    digests[i] = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return Status::Ok();
  }));
  return Combine(digests);
}

std::string ChecksumHex(uint64_t checksum) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, checksum >>= 4) s[static_cast<size_t>(i)] = kHex[checksum & 15];
  return s;
}

bool ParseChecksumHex(const std::string& text, uint64_t* checksum) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *checksum = v;
  return true;
}

}  // namespace dsv4
