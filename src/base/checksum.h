// Data checksums recorded when a file is written and verified before it is
// trusted again: the prepacked sidecar's data region (docs/prepack.md) and
// the converter's output shards (docs/convert.md).
//
// The checksum of a byte range is "chunked XXH3": the range is cut into
// consecutive kChecksumChunkBytes chunks (the last one shorter), each chunk's
// XXH3-64 is computed, and the result is the XXH3-64 of those digests
// written as little-endian 64-bit words.  Chunks are independent, so a large
// range verifies on several threads, and a streaming writer can compute the
// same value front to back.  XXH3 (libxxhash) is not cryptographic: this
// detects corruption (bit rot, a truncated copy, a stray write), not a
// deliberate forgery, which would simply rewrite the checksum too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/progress.h"
#include "base/status.h"

namespace dsv4 {

inline constexpr uint64_t kChecksumChunkBytes = 64ull << 20;

// Streaming form: Update with the bytes in order, split anywhere.
class ChunkedChecksum {
 public:
  ChunkedChecksum();
  ~ChunkedChecksum();
  ChunkedChecksum(const ChunkedChecksum&) = delete;
  ChunkedChecksum& operator=(const ChunkedChecksum&) = delete;

  void Update(const void* data, size_t n);
  // The checksum of everything passed to Update.  Call once.
  uint64_t Finish();

 private:
  void* state_;            // XXH3_state_t of the current chunk
  uint64_t in_chunk_ = 0;  // bytes of the current chunk so far
  std::vector<uint64_t> digests_;
};

// The checksum of [data, data + n), its chunks hashed on up to `threads`
// threads (<= 1: on the caller).  Equal to the streaming form's.
uint64_t ChecksumOf(const uint8_t* data, size_t n, int threads);

// The checksum of bytes [offset, offset + length) of the open file `fd`,
// read with pread (an 8 MiB buffer per thread), chunks hashed on up to
// `threads` threads.  Reading a hot file this way is several times faster
// than faulting in a mapping of it page by page.  `path` names the file in
// messages; `progress` (optional) is told every byte read.
Result<uint64_t> ChecksumOfFile(int fd, uint64_t offset, uint64_t length, const std::string& path,
                                int threads = 1, Progress* progress = nullptr);

// 16 lowercase hex digits, and back (false for anything else).
std::string ChecksumHex(uint64_t checksum);
bool ParseChecksumHex(const std::string& text, uint64_t* checksum);

}  // namespace dsv4
