// Dispatch and driver of the W8A8 kernels: output columns are split into
// fixed panels (and long batches into row blocks) over the thread pool.  The
// INT32 accumulation is exact, so neither the split nor the ISA changes a bit.
#include "kernels/int8_gemm.h"

#include <algorithm>

#include "base/cpu_features.h"
#include "base/logging.h"
#include "kernels/cpu/int8_gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/int8_gemm_ref.h"
#include "kernels/scratch.h"

namespace dsv4::kernels {

namespace {

constexpr int64_t kRowBlock = 64;
// Below this many rows the AVX2 kernel serves AVX-512 machines too: for the
// DRAM-bound GEMV it measured 1.5-2x faster than the VNNI kernel (whose
// offset form needs a second dot product per weight vector, amortized only
// over a 4-row tile); docs/performance.md.  Every kernel gives the same bits,
// so the choice cannot affect results.
constexpr int64_t kVnniMinRows = 4;
// Each task should stream at least this many weight bytes (wake-up cost).
constexpr int64_t kMinBytesPerTask = 64 * 1024;
// A weight in the panel layout (packed at load) takes the outer-product
// kernel (int8_gemm_avx512.cc) at every batch size on VNNI machines.  For a
// kRows weight the rest applies.  From this many rows on, VNNI machines take
// the same kernel: its per-task packing of 64 weight rows is O(N·K),
// repaid once many micro-tiles of 6 rows reuse each packed vector.  Below it
// (down to kBcastMinRows), the broadcast kernel (int8_gemm_bcast_avx512.cc),
// which packs nothing O(N·K): measured 1.0-6x faster than the older paths at
// 2-32 rows, level at 128, ~5 % slower from 512 (docs/performance.md "W8A8
// broadcast kernel side by side with oneDNN").
constexpr int64_t kPackedMinRows = 512;
// One row takes the AVX2 kernel (faster than the broadcast kernel's 4-row
// tile with 3 rows of padding).
constexpr int64_t kBcastMinRows = 2;
// Broadcast tasks: rows x columns (the column blocks shrink until every
// thread has two tasks, down to kInt8BcastMinCols).
constexpr int64_t kBcastRowBlock = 256;
constexpr int64_t kBcastColBlock = 96;
static_assert(kBcastRowBlock % cpu::kInt8BcastRows == 0);
// Packed tasks per thread the column blocks alone must give before a task
// takes every row: each task packs its 64 columns over the whole K, so a
// column block cut into row blocks packs the same weights once per block.
// With tasks of 240 rows, a 1,024-row GEMM (N 2048, K 4096) packed each
// column 5 times and ran at 0.85-0.88x oneDNN; with one row block,
// 0.92-0.97x (docs/performance.md "W8A8: one packing per column block").
constexpr int64_t kPackedTasksPerThread = 4;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The AVX-512 ISA level does not imply VNNI (Skylake-SP lacks it).
bool HasVnni() {
  static const bool vnni = CpuFeatures::Detect().avx512vnni;
  return vnni;
}

int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }

// Rows per packed task (a multiple of cpu::kInt8PackedRows): all of them
// when the column blocks keep every thread busy, else the fewest row blocks
// that do.
int64_t PackedRowBlock(int64_t m, int64_t num_col_blocks, int64_t threads) {
  const int64_t want = kPackedTasksPerThread * threads;
  const int64_t row_blocks = num_col_blocks >= want ? 1 : CeilDiv(want, num_col_blocks);
  return RoundUp(CeilDiv(m, row_blocks), cpu::kInt8PackedRows);
}

struct Int8UnpackedRowsTag {};
struct Int8OffsetActivationsTag {};
struct Int8BcastActivationsTag {};
struct Int8BcastScratchTag {};
struct Int8PackedPanelTag {};
// One cache line of the packed weight panel (so the scratch is 64-byte aligned).
struct alignas(64) PanelLine {
  int8_t bytes[64];
};

// The panel path: activations offset to unsigned once (in the caller's
// scratch, read by every task), then tasks of 64 columns x PackedRowBlock
// rows, each reading its block of a kPanels weight in place or packing its
// columns of a kRows weight into its own thread's scratch.
void PackedInt8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& w,
                    bf16* y, ThreadPool* pool) {
  const int64_t k = w.in;
  const int64_t ldx = RoundUp(k, 4);
  const int64_t m_pad = RoundUp(m, cpu::kInt8PackedRows);
  uint8_t* xu =
      ScratchArray<Int8OffsetActivationsTag, uint8_t>::Get(static_cast<size_t>(m_pad * ldx));
  ParallelFor(pool, m_pad, CeilDiv(32 * 1024, std::max<int64_t>(ldx, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  uint8_t* row = xu + r * ldx;
                  int64_t i = 0;
                  if (r < m) {
                    const int8_t* src = x_codes + r * k;
                    for (; i < k; ++i) row[i] = static_cast<uint8_t>(src[i]) ^ 0x80u;
                  }
                  for (; i < ldx; ++i) row[i] = 0;
                }
              });
  const cpu::Int8PackedArgs args{xu, ldx, x_scales, m, w, y};
  const int64_t num_col_blocks = CeilDiv(w.out, cpu::kInt8PackedCols);
  const int64_t threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t row_block = PackedRowBlock(m, num_col_blocks, threads);
  const int64_t num_tasks = num_col_blocks * CeilDiv(m, row_block);
  const bool pack = w.layout == Int8Layout::kRows;
  const int64_t panel_lines = CeilDiv(Int8PanelBlockBytes(k), 64);
  const auto run = [&](int64_t begin, int64_t end) {
    PanelLine* panel =
        pack ? ScratchArray<Int8PackedPanelTag, PanelLine>::Get(panel_lines) : nullptr;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r0 = (t / num_col_blocks) * row_block;
      const int64_t c0 = (t % num_col_blocks) * cpu::kInt8PackedCols;
      cpu::Int8GemmAvx512VnniPacked(args, r0, std::min(m, r0 + row_block), c0,
                                    std::min(w.out, c0 + cpu::kInt8PackedCols), panel);
    }
  };
  // Tasks are claimed dynamically: on a shared machine a preempted worker
  // then delays the call by one task, not by a static share.
  if (pool == nullptr || pool->num_threads() == 1 || num_tasks < 2) {
    run(0, num_tasks);
  } else {
    pool->ParallelForDynamic(num_tasks, 1, run);
  }
}

// The broadcast path: activations interleaved once (in the caller's scratch,
// read by every task), then tasks of row blocks x column blocks, claimed
// dynamically, each with its own thread's accumulator scratch.
void BcastInt8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& w,
                   bf16* y, ThreadPool* pool) {
  const int64_t k = w.in;
  const int64_t chunks = CeilDiv(m, cpu::kInt8BcastRows);
  PanelLine* xt = ScratchArray<Int8BcastActivationsTag, PanelLine>::Get(
      static_cast<size_t>(CeilDiv(cpu::Int8BcastActBytes(m, k), 64)));
  uint8_t* xt_bytes = reinterpret_cast<uint8_t*>(xt->bytes);
  ParallelFor(pool, chunks, CeilDiv(4096, std::max<int64_t>(k, 1)),
              [&](int64_t begin, int64_t end) {
                cpu::Int8BcastPackActivations(x_codes, m, k, begin, end, xt_bytes);
              });
  const cpu::Int8BcastArgs args{xt_bytes, x_scales, m, w, y};
  const int64_t threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t row_blocks = CeilDiv(m, kBcastRowBlock);
  // Even column blocks of at least kInt8BcastMinCols (w.out >= that).
  int64_t col_blocks = CeilDiv(w.out, kBcastColBlock);
  if (row_blocks * col_blocks < 2 * threads) col_blocks = CeilDiv(2 * threads, row_blocks);
  col_blocks = std::clamp<int64_t>(col_blocks, 1, w.out / cpu::kInt8BcastMinCols);
  const int64_t num_tasks = row_blocks * col_blocks;
  const auto run = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r0 = (t / col_blocks) * kBcastRowBlock;
      const int64_t r1 = std::min(m, r0 + kBcastRowBlock);
      const int64_t b = t % col_blocks;
      const int64_t c0 = w.out * b / col_blocks, c1 = w.out * (b + 1) / col_blocks;
      PanelLine* scratch = ScratchArray<Int8BcastScratchTag, PanelLine>::Get(
          static_cast<size_t>(CeilDiv(cpu::Int8BcastScratchBytes(r1 - r0, c1 - c0), 64)));
      cpu::Int8GemmAvx512VnniBcast(args, r0, r1, c0, c1, scratch);
    }
  };
  if (pool == nullptr || threads == 1 || num_tasks < 2) {
    run(0, num_tasks);
  } else {
    pool->ParallelForDynamic(num_tasks, 1, run);
  }
}

}  // namespace

bool Int8GemmUsesPanels() { return ActiveIsa() == Isa::kAvx512 && HasVnni(); }

void Int8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& given,
              bf16* y, ThreadPool* pool) {
  if (m <= 0 || given.out <= 0) return;
  const Isa isa = ActiveIsa();
  const bool has_vnni = isa == Isa::kAvx512 && HasVnni();
  // A kPanels weight is read in place by the panel kernel at every batch
  // size (no packing per call); elsewhere it is unpacked into rows first.
  Int8Weight w = given;
  if (w.layout == Int8Layout::kPanels && !has_vnni) {
    w = UnpackInt8Rows(
        w, ScratchArray<Int8UnpackedRowsTag, int8_t>::Get(static_cast<size_t>(w.out * w.in)));
  }
  if (isa == Isa::kScalar) return ref::Int8Gemm(x_codes, x_scales, m, w, y, pool);
  // The VNNI kernel's offset form keeps row totals exact in INT32 up to here.
  DSV4_CHECK(w.in <= 65536);
  if (has_vnni && (m >= kPackedMinRows || w.layout == Int8Layout::kPanels)) {
    return PackedInt8Gemm(x_codes, x_scales, m, w, y, pool);
  }
  if (has_vnni && m >= kBcastMinRows && w.out >= cpu::kInt8BcastMinCols && w.in > 0) {
    return BcastInt8Gemm(x_codes, x_scales, m, w, y, pool);
  }
  const bool vnni = has_vnni && m >= kVnniMinRows;
  const cpu::Int8GemmArgs args{x_codes, x_scales, m, w, y};
  const int64_t num_panels = CeilDiv(w.out, cpu::kInt8Panel);
  const int64_t num_tasks = num_panels * CeilDiv(m, kRowBlock);
  const int64_t grain =
      std::max<int64_t>(1, CeilDiv(kMinBytesPerTask, std::max<int64_t>(1, cpu::kInt8Panel * w.in)));
  ParallelFor(pool, num_tasks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row_block = t / num_panels;
      const int64_t panel = t % num_panels;
      const int64_t r0 = row_block * kRowBlock;
      const int64_t r1 = std::min(m, r0 + kRowBlock);
      const int64_t c0 = panel * cpu::kInt8Panel;
      const int64_t c1 = std::min(w.out, c0 + cpu::kInt8Panel);
      if (vnni) {
        cpu::Int8GemmAvx512Vnni(args, r0, r1, c0, c1);
      } else {
        cpu::Int8GemmAvx2(args, r0, r1, c0, c1);
      }
    }
  });
}

}  // namespace dsv4::kernels
