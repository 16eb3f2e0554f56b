#include "base/checksum.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>

#include "base/file_util.h"

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

uint64_t ChecksumOf(const uint8_t* data, size_t n, int threads) {
  const size_t num_chunks = static_cast<size_t>((n + kChecksumChunkBytes - 1) / kChecksumChunkBytes);
  std::vector<uint64_t> digests(num_chunks);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < num_chunks; i = next++) {
      const size_t begin = i * kChecksumChunkBytes;
      const size_t len = std::min<size_t>(kChecksumChunkBytes, n - begin);
      digests[i] = XXH3_64bits(data + begin, len);
    }
  };
  std::vector<std::thread> helpers;
  const size_t want = std::min<size_t>(num_chunks, static_cast<size_t>(std::max(threads, 1)));
  for (size_t t = 1; t < want; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer helpers: same result (chunks are claimed, not assigned)
    }
  }
  work();
  for (std::thread& t : helpers) t.join();
  return Combine(digests);
}

Result<uint64_t> ChecksumOfFile(int fd, uint64_t offset, uint64_t length,
                                const std::string& path) {
  ChunkedChecksum sum;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(length, 8ull << 20)));
  while (length > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(length, buf.size()));
    const ssize_t r = ::pread(fd, buf.data(), want, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return IoError("{}: read failed: {}", path, DescribeErrno(errno));
    if (r == 0) return DataLoss("{}: file ends {} bytes early", path, length);
    sum.Update(buf.data(), static_cast<size_t>(r));
    offset += static_cast<uint64_t>(r);
    length -= static_cast<uint64_t>(r);
  }
  return sum.Finish();
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
