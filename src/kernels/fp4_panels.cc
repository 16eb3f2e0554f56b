// The FP4 panel layout (docs/kernels.md "FP4 panel layout").  Decode
// streams each weight once per token; in the checkpoint's row layout a
// 16-column panel is 16 reads in flight `in/2` bytes apart, which one core
// streamed at about two thirds of what it reaches on one sequential stream.
// Grouped by panels, a GEMV reads its whole share front to back; inside a
// group's 128-block the columns' bytes are interleaved 4 by 4, so one
// 64-byte load holds 4 bytes of each of the 16 columns and the kernels' dot
// products put one column in each vector lane (no reduction across lanes).
#include <array>
#include <cstring>

#include "base/logging.h"
#include "kernels/gemm.h"

namespace dsv4::kernels {

namespace {

constexpr int64_t kGroup = kFp4PanelColumns;
// Bytes of one column's 128-block: codes, scales; of one group's block.
constexpr int64_t kBlockCodes = 64;
constexpr int64_t kBlockScales = 4;
constexpr int64_t kGroupCodes = kGroup * kBlockCodes;
// A padding column's scale byte: 2^0 (its codes are +0, so it sums to 0).
constexpr uint8_t kPadScale = 127;

int64_t Groups(int64_t out) { return (out + kGroup - 1) / kGroup; }

// Index of column col's group block kb among all group blocks.
int64_t GroupBlock(const Fp4Weight& w, int64_t col, int64_t kb) {
  return (col / kGroup) * (w.in / 128) + kb;
}

// Where dword d (packed bytes 4d..4d+3) of column col's 128-block kb lies in
// the panel layout: chunk d of the group block, the column's 4 bytes in it.
int64_t CodeDwordAt(const Fp4Weight& w, int64_t col, int64_t kb, int64_t d) {
  return GroupBlock(w, col, kb) * kGroupCodes + d * kBlockCodes + (col % kGroup) * 4;
}

int64_t ScalesAt(const Fp4Weight& w, int64_t col, int64_t kb) {
  return (GroupBlock(w, col, kb) * kGroup + col % kGroup) * kBlockScales;
}

// The scales proper; the flag byte follows them.
int64_t ScaleBodyBytes(int64_t out, int64_t in) { return Groups(out) * kGroup * (in / 32); }

}  // namespace

int64_t Fp4PanelPackedBytes(int64_t out, int64_t in) {
  DSV4_CHECK(in % 128 == 0);
  return Groups(out) * kGroup * (in / 2);
}

int64_t Fp4PanelScaleBytes(int64_t out, int64_t in) {
  DSV4_CHECK(in % 128 == 0);
  return ScaleBodyBytes(out, in) + 1;
}

bool Fp4PanelsFitBf16(const Fp4Weight& w) {
  DSV4_CHECK(w.layout == Fp4Layout::kPanels);
  return w.scales[ScaleBodyBytes(w.out, w.in)] == 1;
}

bool Fp4ScalesFitBf16(const uint8_t* scales, int64_t count) {
  bool fit = true;  // no early exit: a branch-free pass the compiler vectorizes
  for (int64_t i = 0; i < count; ++i) {
    fit &= scales[i] >= kFp4Bf16MinScale && scales[i] <= kFp4Bf16MaxScale;
  }
  return fit;
}

Fp4Weight PackFp4Panels(const Fp4Weight& w, uint8_t* packed, uint8_t* scales) {
  DSV4_CHECK(w.layout == Fp4Layout::kRows && w.in % 128 == 0);
  const int64_t num_kb = w.in / 128;
  Fp4Weight p = w;
  p.packed = packed;
  p.scales = scales;
  p.layout = Fp4Layout::kPanels;
  // The padding columns' scales (2^0) always fit.
  scales[ScaleBodyBytes(w.out, w.in)] = Fp4ScalesFitBf16(w.scales, w.out * (w.in / 32)) ? 1 : 0;
  // In the order of the packed bytes: the destination is written front to
  // back (first-touched in order), the source read 4 bytes per column.
  for (int64_t g = 0; g < Groups(w.out); ++g) {
    for (int64_t kb = 0; kb < num_kb; ++kb) {
      for (int64_t d = 0; d < kBlockCodes / 4; ++d) {
        for (int64_t c = 0; c < kGroup; ++c) {
          const int64_t col = g * kGroup + c;
          uint8_t* dst = packed + CodeDwordAt(w, col, kb, d);
          if (col < w.out) {
            std::memcpy(dst, w.packed + col * (w.in / 2) + kb * kBlockCodes + 4 * d, 4);
          } else {
            std::memset(dst, 0, 4);
          }
        }
      }
      for (int64_t c = 0; c < kGroup; ++c) {
        const int64_t col = g * kGroup + c;
        uint8_t* sc = scales + ScalesAt(w, col, kb);
        if (col < w.out) {
          std::memcpy(sc, w.scales + col * (w.in / 32) + kb * kBlockScales, kBlockScales);
        } else {
          std::memset(sc, kPadScale, kBlockScales);
        }
      }
    }
  }
  return p;
}

std::array<uint8_t, 16> Fp4CodesOf(const Fp4Weight& w, int64_t col, int64_t j) {
  std::array<uint8_t, 16> codes;
  if (w.layout == Fp4Layout::kRows) {
    std::memcpy(codes.data(), w.packed + col * (w.in / 2) + j * 16, 16);
    return codes;
  }
  // 32-block j of block j/4: the block's packed bytes 16(j%4).. = dwords 4(j%4)..+3.
  for (int64_t i = 0; i < 4; ++i) {
    std::memcpy(codes.data() + 4 * i, w.packed + CodeDwordAt(w, col, j / 4, 4 * (j % 4) + i), 4);
  }
  return codes;
}

uint8_t Fp4ScaleOf(const Fp4Weight& w, int64_t col, int64_t j) {
  if (w.layout == Fp4Layout::kRows) return w.scales[col * (w.in / 32) + j];
  return w.scales[ScalesAt(w, col, j / 4) + j % 4];
}

}  // namespace dsv4::kernels
