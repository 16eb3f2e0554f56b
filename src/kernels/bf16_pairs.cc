// The BF16 pair layout (gemm.h, docs/kernels.md "BF16 pair layout").  The
// dense GEMV walks two columns at a time, 128 elements of each per step: in
// the checkpoint's rows that is two streams `in` elements apart (plus their
// prefetches, four), which the hardware prefetchers serve at ~60 % of a
// bare read; in pairs it is one stream front to back.  Only addresses
// change: every kernel reads the same elements in the same order.
#include <algorithm>
#include <cstring>

#include "base/logging.h"
#include "kernels/gemm.h"

namespace dsv4::kernels {

namespace {

constexpr int64_t kChunk = 128;

// Element offset of column c's chunk i in the pair layout.
int64_t ChunkAt(int64_t in, int64_t c, int64_t i) {
  return ((c / 2) * 2 * (in / kChunk) + 2 * i + c % 2) * kChunk;
}

}  // namespace

bool Bf16PairsFit(int64_t in) { return in > 0 && in % kChunk == 0; }

int64_t Bf16PairsElements(int64_t out, int64_t in) { return (out + 1) / 2 * 2 * in; }

void PackBf16Pairs(const bf16* rows, int64_t out, int64_t in, bf16* pairs) {
  DSV4_CHECK(Bf16PairsFit(in));
  for (int64_t c = 0; c < (out + 1) / 2 * 2; ++c) {
    for (int64_t i = 0; i < in / kChunk; ++i) {
      bf16* dst = pairs + ChunkAt(in, c, i);
      if (c < out) {
        std::memcpy(dst, rows + c * in + i * kChunk, kChunk * sizeof(bf16));
      } else {
        std::fill(dst, dst + kChunk, bf16{});
      }
    }
  }
}

void UnpackBf16Rows(const bf16* pairs, int64_t out, int64_t in, bf16* rows) {
  DSV4_CHECK(Bf16PairsFit(in));
  for (int64_t c = 0; c < out; ++c) {
    for (int64_t i = 0; i < in / kChunk; ++i) {
      std::memcpy(rows + c * in + i * kChunk, pairs + ChunkAt(in, c, i), kChunk * sizeof(bf16));
    }
  }
}

}  // namespace dsv4::kernels
