// The FP4 panel layout (docs/kernels.md "FP4 panel layout").  Decode
// streams each weight once per token; in the checkpoint's row layout a
// 16-column panel is 16 reads in flight `in/2` bytes apart, which one core
// streamed at about two thirds of what it reaches on one sequential stream.
// Grouped by panels, a GEMV reads its whole share front to back.
#include <cstring>

#include "base/logging.h"
#include "kernels/gemm.h"

namespace dsv4::kernels {

namespace {

constexpr int64_t kGroup = kFp4PanelColumns;
// Bytes of one column's 128-block: codes, scales.
constexpr int64_t kBlockCodes = 64;
constexpr int64_t kBlockScales = 4;
// A padding column's scale byte: 2^0 (its codes are +0, so it sums to 0).
constexpr uint8_t kPadScale = 127;

int64_t Groups(int64_t out) { return (out + kGroup - 1) / kGroup; }

// Index of column col's 128-block kb among all blocks, in panel order.
int64_t PanelBlock(const Fp4Weight& w, int64_t col, int64_t kb) {
  return ((col / kGroup) * (w.in / 128) + kb) * kGroup + col % kGroup;
}

}  // namespace

int64_t Fp4PanelPackedBytes(int64_t out, int64_t in) {
  DSV4_CHECK(in % 128 == 0);
  return Groups(out) * kGroup * (in / 2);
}

int64_t Fp4PanelScaleBytes(int64_t out, int64_t in) {
  DSV4_CHECK(in % 128 == 0);
  return Groups(out) * kGroup * (in / 32);
}

Fp4Weight PackFp4Panels(const Fp4Weight& w, uint8_t* packed, uint8_t* scales) {
  DSV4_CHECK(w.layout == Fp4Layout::kRows && w.in % 128 == 0);
  const int64_t num_kb = w.in / 128;
  Fp4Weight p = w;
  p.packed = packed;
  p.scales = scales;
  p.layout = Fp4Layout::kPanels;
  // In the order of the packed bytes: the destination is written front to
  // back (first-touched in order), the source read 64 bytes per column.
  for (int64_t g = 0; g < Groups(w.out); ++g) {
    for (int64_t kb = 0; kb < num_kb; ++kb) {
      for (int64_t c = 0; c < kGroup; ++c) {
        const int64_t col = g * kGroup + c;
        uint8_t* codes = packed + PanelBlock(w, col, kb) * kBlockCodes;
        uint8_t* sc = scales + PanelBlock(w, col, kb) * kBlockScales;
        if (col < w.out) {
          std::memcpy(codes, w.packed + col * (w.in / 2) + kb * kBlockCodes, kBlockCodes);
          std::memcpy(sc, w.scales + col * (w.in / 32) + kb * kBlockScales, kBlockScales);
        } else {
          std::memset(codes, 0, kBlockCodes);
          std::memset(sc, kPadScale, kBlockScales);
        }
      }
    }
  }
  return p;
}

const uint8_t* Fp4CodesOf(const Fp4Weight& w, int64_t col, int64_t j) {
  if (w.layout == Fp4Layout::kRows) return w.packed + col * (w.in / 2) + j * 16;
  return w.packed + PanelBlock(w, col, j / 4) * kBlockCodes + (j % 4) * 16;
}

uint8_t Fp4ScaleOf(const Fp4Weight& w, int64_t col, int64_t j) {
  if (w.layout == Fp4Layout::kRows) return w.scales[col * (w.in / 32) + j];
  return w.scales[PanelBlock(w, col, j / 4) * kBlockScales + j % 4];
}

}  // namespace dsv4::kernels
