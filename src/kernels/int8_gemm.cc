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
// Each task should stream at least this many weight bytes (wake-up cost).
constexpr int64_t kMinBytesPerTask = 64 * 1024;
// On VNNI machines every call takes the outer-product kernel
// (int8_gemm_avx512.cc): a kPanels weight (packed at load, the model's) is
// read in place, a kRows weight (tests, tools) is packed per task.  The
// broadcast kernel and the 4 x 4 VNNI tile that served kRows weights below
// 512 rows went when the model started packing at load: no caller of the
// model's kept them busy (docs/kernels.md "W8A8 panel layout").  The AVX2
// kernel serves CPUs without VNNI.
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
struct Int8PackedPanelTag {};
// One cache line of the packed weight panel (so the scratch is 64-byte aligned).
struct alignas(64) PanelLine {
  int8_t bytes[64];
};

// The panel path: activations offset to unsigned as the tiles broadcast them
// (or, for K not a multiple of 4, once into scratch read by every task),
// then tasks of 64 columns x PackedRowBlock rows, each reading its block of
// a kPanels weight in place or packing its columns of a kRows weight into
// its own thread's scratch.
void PackedInt8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& w,
                    bf16* y, ThreadPool* pool) {
  const int64_t k = w.in;
  cpu::Int8PackedArgs args{nullptr, 0, false, x_scales, m, w, y};
  // Whole 4-byte groups: the tiles read the caller's codes and offset each
  // broadcast (+1 to +8 % at 1,024 rows against a pass of its own, which
  // wrote and then read back a second copy of the activations:
  // docs/performance.md "W8A8: the activation offset in the tiles").
  // Otherwise a row's last group would reach past it, so the rows are
  // copied, offset and padded first.
  if (k % 4 == 0) {
    args.xu = reinterpret_cast<const uint8_t*>(x_codes);
    args.ldx = k;
    args.x_signed = true;
  } else {
    // The tiles never read a row past m (the last rows take a tile of their
    // own size), so only the K padding is written.
    const int64_t ldx = RoundUp(k, 4);
    uint8_t* xu =
        ScratchArray<Int8OffsetActivationsTag, uint8_t>::Get(static_cast<size_t>(m * ldx));
    ParallelFor(pool, m, CeilDiv(32 * 1024, std::max<int64_t>(ldx, 1)),
                [&](int64_t begin, int64_t end) {
                  cpu::Int8OffsetRowsAvx512(x_codes, k, ldx, begin, end, xu);
                });
    args.xu = xu;
    args.ldx = ldx;
  }
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

}  // namespace

bool Int8GemmUsesPanels() { return ActiveIsa() == Isa::kAvx512 && HasVnni(); }

void Int8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& given,
              bf16* y, ThreadPool* pool) {
  if (m <= 0 || given.out <= 0) return;
  const Isa isa = ActiveIsa();
  const bool has_vnni = isa == Isa::kAvx512 && HasVnni();
  // A kPanels weight is read in place by the panel kernel; without VNNI it
  // is unpacked into rows first.
  Int8Weight w = given;
  if (w.layout == Int8Layout::kPanels && !has_vnni) {
    w = UnpackInt8Rows(
        w, ScratchArray<Int8UnpackedRowsTag, int8_t>::Get(static_cast<size_t>(w.out * w.in)));
  }
  if (isa == Isa::kScalar) return ref::Int8Gemm(x_codes, x_scales, m, w, y, pool);
  // The VNNI kernel's offset form keeps row totals exact in INT32 up to here.
  DSV4_CHECK(w.in <= 65536);
  if (has_vnni) return PackedInt8Gemm(x_codes, x_scales, m, w, y, pool);
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
      cpu::Int8GemmAvx2(args, r0, r1, c0, c1);
    }
  });
}

}  // namespace dsv4::kernels
