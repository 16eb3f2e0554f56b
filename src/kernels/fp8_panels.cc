// The FP8 panel layout (docs/kernels.md "FP8 panel layout").  The BF16 dot
// kernel puts one output column in each FP32 lane and adds a K pair per
// vdpbf16ps: each lane needs its column's two codes of the pair next to each
// other, and the 16 columns of a group side by side.  So a group's 128-block
// is 32 chunks of 64 bytes, chunk q holding pairs 2q and 2q + 1 of all 16
// columns, placed where the kernel's byte-to-BF16 unpacking (within 128-bit
// lanes: bytes 16L + j and 16L + 8 + j, j < 8) puts word 2c + e of vector h
// = element e of pair 2q + h of column c.  The chunks of a group's blocks 2i
// and 2i + 1 alternate (Fp8PanelChunkAt): a GEMV reads two blocks side by
// side, and so streams its share front to back; no path sums across lanes.
#include <cstring>

#include "base/logging.h"
#include "kernels/gemm.h"

namespace dsv4::kernels {

namespace {

constexpr int64_t kGroup = kFp8PanelColumns;
constexpr int64_t kChunk = 64;                 // bytes: 2 pairs x 16 columns
constexpr int64_t kGroupBlock = kGroup * 128;  // bytes of a group's 128-block

int64_t Groups(int64_t out) { return (out + kGroup - 1) / kGroup; }

// Byte of (column c < 16, element e < 128) within its group's 128-block, its
// chunks side by side (chunk e/4 at e/4·64).
constexpr int64_t BlockByte(int64_t c, int64_t e) {
  const int64_t word = 2 * c + e % 2;  // lane c, element e % 2 of the pair
  const int64_t pair = e / 2;
  return (pair / 2) * kChunk + 16 * (word / 8) + 8 * (pair % 2) + word % 8;
}

// Byte of column col's code at input k in the panel layout.
int64_t PanelByte(int64_t in, int64_t col, int64_t k) {
  const int64_t b = BlockByte(col % kGroup, k % 128);
  return Fp8PanelChunkAt(in / 128, col / kGroup, k / 128, b / kChunk) + b % kChunk;
}

// For every byte of a group block (chunks side by side), where it comes from
// in the block's [16, 128] tile of the row layout.
struct BlockSources {
  uint16_t from[kGroupBlock];
  constexpr BlockSources() : from() {
    for (int64_t c = 0; c < kGroup; ++c) {
      for (int64_t e = 0; e < 128; ++e) from[BlockByte(c, e)] = static_cast<uint16_t>(c * 128 + e);
    }
  }
};
constexpr BlockSources kBlockSources;

}  // namespace

int64_t Fp8PanelBytes(int64_t out, int64_t in) {
  DSV4_CHECK(in % 128 == 0);
  return Groups(out) * kGroup * in;
}

Fp8Weight PackFp8Panels(const Fp8Weight& w, uint8_t* codes) {
  DSV4_CHECK(w.layout == Fp8Layout::kRows && w.in % 128 == 0);
  Fp8Weight p = w;
  p.codes = codes;
  p.layout = Fp8Layout::kPanels;
  // Block by block, a pair's two blocks filling one 4 KiB stretch (pages
  // first-touched in order): the block's [16, 128] tile of rows gathered,
  // then permuted into its chunks.
  const int64_t num_kb = w.in / 128;
  uint8_t tile[kGroupBlock];
  for (int64_t g = 0; g < Groups(w.out); ++g) {
    for (int64_t kb = 0; kb < num_kb; ++kb) {
      for (int64_t c = 0; c < kGroup; ++c) {
        const int64_t col = g * kGroup + c;
        if (col < w.out) {
          std::memcpy(tile + c * 128, w.codes + col * w.in + kb * 128, 128);
        } else {
          std::memset(tile + c * 128, 0, 128);
        }
      }
      for (int64_t q = 0; q < kGroupBlock / kChunk; ++q) {
        uint8_t* dst = codes + Fp8PanelChunkAt(num_kb, g, kb, q);
        for (int64_t d = 0; d < kChunk; ++d) dst[d] = tile[kBlockSources.from[q * kChunk + d]];
      }
    }
  }
  return p;
}

Fp8Weight UnpackFp8Rows(const Fp8Weight& w, uint8_t* codes) {
  DSV4_CHECK(w.layout == Fp8Layout::kPanels);
  Fp8Weight r = w;
  r.codes = codes;
  r.layout = Fp8Layout::kRows;
  for (int64_t c = 0; c < w.out; ++c) {
    for (int64_t k = 0; k < w.in; ++k) codes[c * w.in + k] = w.codes[PanelByte(w.in, c, k)];
  }
  return r;
}

uint8_t Fp8CodeOf(const Fp8Weight& w, int64_t col, int64_t k) {
  if (w.layout == Fp8Layout::kRows) return w.codes[col * w.in + k];
  return w.codes[PanelByte(w.in, col, k)];
}

}  // namespace dsv4::kernels
