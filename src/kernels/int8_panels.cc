// The W8A8 panel layout (int8_gemm.h, docs/kernels.md "W8A8 panel layout"):
// what vpdpbusd wants as an outer product.  Each group of 4 inputs of 16
// columns is one 64-byte vector (a column's 4 codes in its INT32 lane), so
// a micro-tile loads 4 vectors per 4 inputs and broadcasts each row's 4
// activation bytes against them.  The offset sums after each block are the
// correction for activations offset to unsigned (a + 128): computed once
// here instead of per call.
#include <cstring>

#include "base/logging.h"
#include "kernels/cpu/int8_gemm_cpu.h"
#include "kernels/int8_gemm.h"

namespace dsv4::kernels {

namespace {

constexpr int64_t kCols = kInt8PanelColumns;
constexpr int64_t kVecCols = 16;  // columns per 64-byte vector
constexpr int64_t kQuadBytes = kCols * 4;

int64_t Quads(int64_t in) { return (in + 3) / 4; }
int64_t Blocks(int64_t out) { return (out + kCols - 1) / kCols; }

// Offset of (column c < 64 of a block, quad q, byte i < 4) in the block.
int64_t BlockByte(int64_t c, int64_t q, int64_t i) {
  return q * kQuadBytes + (c / kVecCols) * 64 + (c % kVecCols) * 4 + i;
}

}  // namespace

int64_t Int8PanelBlockBytes(int64_t in) {
  return Quads(in) * kQuadBytes + kCols * static_cast<int64_t>(sizeof(int32_t));
}

int64_t Int8PanelBytes(int64_t out, int64_t in) { return Blocks(out) * Int8PanelBlockBytes(in); }

Int8Weight PackInt8Panels(const Int8Weight& w, int8_t* codes) {
  DSV4_CHECK(w.layout == Int8Layout::kRows);
  DSV4_CHECK(reinterpret_cast<uintptr_t>(codes) % 64 == 0);
  const int64_t quads = Quads(w.in);
  // Where the panel kernel runs, its own packer (transposes, ~10x faster
  // than this loop: the load packs a whole W8A8 checkpoint).
  const bool simd = Int8GemmUsesPanels() && w.in > 0;
  for (int64_t b = 0; b < Blocks(w.out); ++b) {
    int8_t* block = codes + b * Int8PanelBlockBytes(w.in);
    if (simd) {
      cpu::Int8PackPanelBlockAvx512Vnni(w, b * kCols, block);
      continue;
    }
    int32_t sums[kCols];
    for (int64_t c = 0; c < kCols; ++c) {
      const int64_t n = b * kCols + c;
      const int8_t* row = n < w.out ? w.codes + n * w.in : nullptr;
      int32_t sum = 0;
      for (int64_t q = 0; q < quads; ++q) {
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t k = 4 * q + i;
          const int8_t v = row != nullptr && k < w.in ? row[k] : 0;
          block[BlockByte(c, q, i)] = v;
          sum += v;
        }
      }
      sums[c] = 128 * sum;
    }
    std::memcpy(block + quads * kQuadBytes, sums, sizeof(sums));
  }
  Int8Weight p = w;
  p.codes = codes;
  p.layout = Int8Layout::kPanels;
  return p;
}

Int8Weight UnpackInt8Rows(const Int8Weight& w, int8_t* codes) {
  DSV4_CHECK(w.layout == Int8Layout::kPanels);
  for (int64_t n = 0; n < w.out; ++n) {
    const int8_t* block = w.codes + (n / kCols) * Int8PanelBlockBytes(w.in);
    for (int64_t k = 0; k < w.in; ++k) {
      codes[n * w.in + k] = block[BlockByte(n % kCols, k / 4, k % 4)];
    }
  }
  Int8Weight r = w;
  r.codes = codes;
  r.layout = Int8Layout::kRows;
  return r;
}

}  // namespace dsv4::kernels
