// The dense and BF16-numerics linear layers (BF16, FP32 and FP8 weights
// against BF16 activations): the activations to the form the kernel reads,
// then the output split into fixed column panels (and row blocks) over the
// thread pool (gemm_driver.h).  An element's arithmetic never depends on
// which task computes it, so results do not depend on the thread count.
// The block-scaled ones are in gemm_block_scaled.cc.  Design notes:
// docs/kernels.md.
#include "kernels/gemm.h"

#include <algorithm>
#include <cstring>

#include "base/cpu_features.h"
#include "base/logging.h"
#include "kernels/gemm_driver.h"
#include "kernels/ref/gemm_ref.h"

namespace dsv4::kernels {

namespace {

// The dense GEMMs' activations: x rows (stride ldx) to FP32, zero padded to
// a multiple of 128 (the kernels load whole chunks), [m, *ldxf].
float* DenseActivations(const bf16* x, int64_t ldx, int64_t m, int64_t k, int64_t* ldxf,
                        ThreadPool* pool) {
  *ldxf = CeilDiv(k, 128) * 128;
  float* xf = Activations(m * *ldxf);
  ForEachRow(pool, m, k, [&](int64_t r) {
    for (int64_t i = 0; i < k; ++i) xf[r * *ldxf + i] = Bf16ToF32(x[r * ldx + i]);
    for (int64_t i = k; i < *ldxf; ++i) xf[r * *ldxf + i] = 0.0f;
  });
  return xf;
}

cpu::DenseGemmArgs DenseArgs(const float* xf, int64_t ldxf, int64_t m, int64_t k,
                             const bf16* w_bf16, const float* w_f32, const Fp8Weight* w_fp8,
                             int64_t n, bf16* y_bf16, float* y_f32, int64_t ldy,
                             Bf16Layout layout = Bf16Layout::kRows) {
  DSV4_CHECK(layout == Bf16Layout::kRows || (w_bf16 != nullptr && Bf16PairsFit(k)));
  cpu::DenseGemmArgs args;
  args.w_pairs = layout == Bf16Layout::kPairs;
  args.x = xf;
  args.ldx = ldxf;
  args.m = m;
  args.k = k;
  args.w_bf16 = w_bf16;
  args.w_f32 = w_f32;
  args.w_fp8 = w_fp8;
  args.n = n;
  args.y_bf16 = y_bf16;
  args.y_f32 = y_f32;
  args.ldy = ldy;
  return args;
}

// Shared driver of the three dense GEMMs: the activations to FP32, then
// panels.
void DenseGemm(const cpu::GemmKernels& simd, const bf16* x, int64_t ldx, int64_t m, int64_t k,
               const bf16* w_bf16, const float* w_f32, const Fp8Weight* w_fp8, int64_t n,
               bf16* y_bf16, float* y_f32, int64_t ldy, ThreadPool* pool,
               Bf16Layout layout = Bf16Layout::kRows) {
  if (m <= 0 || n <= 0) return;
  int64_t ldxf = 0;
  const float* xf = DenseActivations(x, ldx, m, k, &ldxf, pool);
  const cpu::DenseGemmArgs args =
      DenseArgs(xf, ldxf, m, k, w_bf16, w_f32, w_fp8, n, y_bf16, y_f32, ldy, layout);
  const int64_t bytes_per_weight = w_f32 != nullptr ? 4 : w_fp8 != nullptr ? 1 : 2;
  const int64_t bytes_per_panel = simd.panel * k * bytes_per_weight;
  ForEachTile(pool, m, n, simd.panel, bytes_per_panel,
              [&](const cpu::Tile& t) { simd.dense(args, t); });
}

// The scalar reference reads rows: a pair-layout weight is unpacked into
// this thread's scratch per call.
struct Bf16UnpackTag {};
const bf16* Bf16Rows(const bf16* w, int64_t n, int64_t k, Bf16Layout layout) {
  if (layout == Bf16Layout::kRows) return w;
  bf16* rows = ScratchArray<Bf16UnpackTag, bf16>::Get(static_cast<size_t>(n * k));
  UnpackBf16Rows(w, n, k, rows);
  return rows;
}

}  // namespace

bool GemmBf16ReadsPairs() { return SimdKernels() != nullptr; }

void GemmBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y,
              int64_t ldy, ThreadPool* pool, Bf16Layout layout) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr) {
    return ref::GemmBf16(x, ldx, m, k, Bf16Rows(w, n, k, layout), n, y, ldy, pool);
  }
  DenseGemm(*simd, x, ldx, m, k, w, nullptr, nullptr, n, y, nullptr, ldy, pool, layout);
}

bool Fp8IsExactBf16(const Fp8Weight& w) {
  const int64_t num_scales = ((w.out + 127) / 128) * ((w.in + 127) / 128);
  for (int64_t i = 0; i < num_scales; ++i) {
    if (w.scales[i] < 10 || w.scales[i] > 246) return false;
  }
  // Branch-free so the scan of the codes vectorises.
  // (The panel layout's padding codes are +0.)
  const int64_t num_codes =
      w.layout == Fp8Layout::kPanels ? Fp8PanelBytes(w.out, w.in) : w.out * w.in;
  uint8_t nan = 0;
  for (int64_t i = 0; i < num_codes; ++i) nan |= static_cast<uint8_t>((w.codes[i] & 0x7f) == 0x7f);
  return nan == 0;
}

namespace {

// Runs fn(g, part) for the group-local parts of tile t of a grouped GEMM
// whose groups are group_panels panels each: a tile that straddles a group
// boundary becomes one tile per group, exactly the tiles per-group calls run.
template <typename Fn>
void ForEachGroupPart(const cpu::Tile& t, int64_t group_panels, const Fn& fn) {
  for (int64_t p = t.panel_begin; p < t.panel_end;) {
    const int64_t g = p / group_panels;
    const int64_t end = std::min(t.panel_end, (g + 1) * group_panels);
    fn(g, cpu::Tile{t.row_begin, t.row_end, p - g * group_panels, end - g * group_panels});
    p = end;
  }
}

// Rows [g·rows, (g+1)·rows) of a grouped FP8 weight as a weight of their own
// (rows % 128 == 0: the same offset in either layout, whose groups of 16
// rows are contiguous).
Fp8Weight Fp8Group(const Fp8Weight& w, int64_t rows, int64_t g) {
  Fp8Weight p = w;
  p.codes += g * rows * w.in;
  p.scales += g * (rows / 128) * (w.in / 128);
  p.out = rows;
  return p;
}

// Up to this many rows the dot kernel reads BF16 activations in place; more
// rows (its register tiles) are copied into a cpu::DotActivationLayout first.
constexpr int64_t kFp8DotInPlaceRows = 4;

// GemmBf16Fp8(Grouped) through the FP8 BF16 dot kernel: the BF16
// activations (group g reads x's columns [g·in, (g+1)·in)), in place or
// copied (each group's own DotActivationLayout), as already scaled ones
// (scale 1), w in the panel layout.  groups == 1 or (w.out / groups) % panel == 0.
void GemmBf16Fp8Dot(const cpu::GemmKernels& simd, Fp8Choice fp8, const bf16* x, int64_t ldx,
                    int64_t m, int64_t groups, const Fp8Weight& w, bf16* y, int64_t ldy,
                    ThreadPool* pool) {
  if (m <= 0) return;
  const int64_t rows = w.out / groups, num_kb = w.in / 128;
  const bool in_place = m <= kFp8DotInPlaceRows;
  const cpu::DotActivationLayout l(m, w.in);
  const int64_t group_elements = l.elements;
  static_assert(sizeof(float) == 2 * sizeof(bf16));
  float* buffer = Activations(in_place ? 0 : groups * group_elements / 2);
  auto* blocks = reinterpret_cast<bf16*>(buffer);
  if (!in_place) {
    ForEachRow(pool, m, groups * w.in, [&](int64_t r) {
      const bf16* from = x + r * ldx;
      for (int64_t g = 0; g < groups; ++g) {
        bf16* to = blocks + g * group_elements + l.BlockOffset(r) + r % cpu::kRowBlock * 128;
        for (int64_t kb = 0; kb < num_kb; ++kb, from += 128) {
          std::memcpy(to + kb * l.ldkb, from, 128 * sizeof(bf16));
        }
      }
    });
  }
  const Fp8Weight pw = Fp8ForKernel(w, true);
  const int64_t group_panels = CeilDiv(rows, simd.panel);
  ForEachTile(pool, m, groups * group_panels * simd.panel, simd.panel, simd.panel * w.in,
              [&](const cpu::Tile& t) {
                ForEachGroupPart(t, group_panels, [&](int64_t g, const cpu::Tile& part) {
                  cpu::Fp8GemmArgs args{nullptr, nullptr, m, Fp8Group(pw, rows, g), y + g * rows};
                  args.xh = in_place ? x + g * w.in : blocks + g * group_elements;
                  args.x_scaled = true;  // scale 1: the block sums times the weight's alone
                  args.ldx = in_place ? ldx : l.ldx;
                  args.ldkb = in_place ? 128 : l.ldkb;
                  args.ldrb = in_place ? 0 : l.ldrb;
                  args.ldy = ldy;
                  fp8.kernel(args, part);
                });
              });
}

}  // namespace

void GemmBf16Fp8(const bf16* x, int64_t ldx, int64_t m, const Fp8Weight& w, bf16* y, int64_t ldy,
                 ThreadPool* pool) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr) return ref::GemmBf16Fp8(x, ldx, m, Fp8ForKernel(w, false), y, ldy, pool);
  DSV4_CHECK(w.in % 128 == 0);
  const Fp8Choice fp8 = Fp8Kernel(*simd);
  if (fp8.dot) return GemmBf16Fp8Dot(*simd, fp8, x, ldx, m, 1, w, y, ldy, pool);
  const Fp8Weight rows = Fp8ForKernel(w, false);
  DenseGemm(*simd, x, ldx, m, w.in, nullptr, nullptr, &rows, w.out, y, nullptr, ldy, pool);
}

void GemmBf16Fp8Grouped(const bf16* x, int64_t ldx, int64_t m, int64_t groups, const Fp8Weight& w,
                        bf16* y, int64_t ldy, ThreadPool* pool) {
  DSV4_CHECK(groups > 0 && w.out % groups == 0 && w.in % 128 == 0);
  const int64_t rows = w.out / groups;  // output rows per group
  DSV4_CHECK(rows % 128 == 0);          // a group's scale rows are whole rows
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr || rows % simd->panel != 0) {
    for (int64_t g = 0; g < groups; ++g) {
      GemmBf16Fp8(x + g * w.in, ldx, m, Fp8Group(w, rows, g), y + g * rows, ldy, pool);
    }
    return;
  }
  const Fp8Choice fp8 = Fp8Kernel(*simd);
  if (fp8.dot) return GemmBf16Fp8Dot(*simd, fp8, x, ldx, m, groups, w, y, ldy, pool);
  if (m <= 0) return;
  // Every group's input as FP32, [m, groups·in]: in % 128 == 0, so no padding.
  const int64_t ldxf = groups * w.in;
  float* xf = Activations(m * ldxf);
  ForEachRow(pool, m, ldxf, [&](int64_t r) {
    for (int64_t i = 0; i < ldxf; ++i) xf[r * ldxf + i] = Bf16ToF32(x[r * ldx + i]);
  });
  // One task space over all groups' panels.
  const int64_t group_panels = rows / simd->panel;
  const Fp8Weight wr = Fp8ForKernel(w, false);
  ForEachTile(pool, m, w.out, simd->panel, simd->panel * w.in, [&](const cpu::Tile& t) {
    ForEachGroupPart(t, group_panels, [&](int64_t g, const cpu::Tile& part) {
      const Fp8Weight pw = Fp8Group(wr, rows, g);
      cpu::DenseGemmArgs args;
      args.x = xf + g * w.in;
      args.ldx = ldxf;
      args.m = m;
      args.k = w.in;
      args.w_fp8 = &pw;
      args.n = rows;
      args.y_bf16 = y + g * rows;
      args.ldy = ldy;
      simd->dense(args, part);
    });
  });
}

void GemmBf16F32(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, float* y,
                 ThreadPool* pool, Bf16Layout layout) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr) return ref::GemmBf16F32(x, m, k, Bf16Rows(w, n, k, layout), n, y, pool);
  DenseGemm(*simd, x, k, m, k, w, nullptr, nullptr, n, nullptr, y, n, pool, layout);
}

void GemmBf16F32Pair(const bf16* x, int64_t m, int64_t k, const bf16* w0, int64_t n0, float* y0,
                     const bf16* w1, int64_t n1, float* y1, ThreadPool* pool, Bf16Layout layout) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr || m <= 0 || n0 <= 0 || n1 <= 0) {
    GemmBf16F32(x, m, k, w0, n0, y0, pool, layout);
    GemmBf16F32(x, m, k, w1, n1, y1, pool, layout);
    return;
  }
  int64_t ldxf = 0;
  const float* xf = DenseActivations(x, k, m, k, &ldxf, pool);
  const cpu::DenseGemmArgs a0 =
      DenseArgs(xf, ldxf, m, k, w0, nullptr, nullptr, n0, nullptr, y0, n0, layout);
  const cpu::DenseGemmArgs a1 =
      DenseArgs(xf, ldxf, m, k, w1, nullptr, nullptr, n1, nullptr, y1, n1, layout);
  // One task space over both weights' panels (w0's first); a tile that
  // straddles the two runs as one tile of each, exactly the tiles the two
  // GemmBf16F32 calls would run.
  const int64_t p0 = CeilDiv(n0, simd->panel), p1 = CeilDiv(n1, simd->panel);
  ForEachTile(
      pool, m, (p0 + p1) * simd->panel, simd->panel, simd->panel * k * 2, [&](const cpu::Tile& t) {
        if (t.panel_begin < p0) {
          simd->dense(a0,
                      cpu::Tile{t.row_begin, t.row_end, t.panel_begin, std::min(t.panel_end, p0)});
        }
        if (t.panel_end > p0) {
          simd->dense(a1, cpu::Tile{t.row_begin, t.row_end, std::max(t.panel_begin, p0) - p0,
                                    t.panel_end - p0});
        }
      });
}

void GemmBf16F32Approx(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, float* y,
                       ThreadPool* pool, Bf16Layout layout) {
  // The only table with BF16 dot products is AVX-512's, which needs the
  // AVX512-BF16 CPU feature besides the ISA level.
  static const bool has_bf16_dot = CpuFeatures::Detect().avx512bf16;
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr || simd->bf16_dot == nullptr || !has_bf16_dot) {
    return GemmBf16F32(x, m, k, w, n, y, pool, layout);
  }
  if (m <= 0 || n <= 0) return;
  const bool pairs = layout == Bf16Layout::kPairs;
  DSV4_CHECK(!pairs || Bf16PairsFit(k));
  const cpu::Bf16DotArgs args{x, m, k, w, n, y, pairs};
  ForEachTile(pool, m, n, simd->panel, simd->panel * k * 2,
              [&](const cpu::Tile& t) { simd->bf16_dot(args, t); });
}

void GemmBf16xF32(const bf16* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                  ThreadPool* pool) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr) return ref::GemmBf16xF32(x, m, k, w, n, y, pool);
  DenseGemm(*simd, x, k, m, k, nullptr, w, nullptr, n, nullptr, y, n, pool);
}

}  // namespace dsv4::kernels
