// The GEMM drivers' shared machinery, internal to the kernels layer: the
// kernel table in use, the task split over the thread pool (ForEachTile),
// the activations' scratch and the row-block preparation of the
// block-scaled GEMMs' activations, and the choice of FP8 and FP4 panel
// kernels and weight layouts.  Used by gemm.cc (dense and BF16-numerics
// entry points), gemm_block_scaled.cc (FP8/FP4 entry points and the batch)
// and gemm_activations.cc (the activations' forms).  Design notes:
// docs/kernels.md.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/gemm.h"
#include "kernels/scratch.h"

namespace dsv4::kernels {

// Each thread's share should stream at least this much weight data, or the
// wake-up costs more than it saves.
inline constexpr int64_t kMinBytesPerTask = 64 * 1024;

// The one place that picks a GEMM instruction set: the active ISA's kernel
// table, or null for the scalar reference.  A new ISA is a new table here
// (docs/kernels.md "Writing a kernel once").
const cpu::GemmKernels* SimdKernels();

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Panels per claimed chunk of a GEMM's tasks: enough bytes to pay for a
// wake-up, and even: the kernels walk panels in pairs (two streams per thread
// at 1-2 rows, two panels per register tile), and an odd chunk left a panel
// to walk alone (the FP8 decode GEMVs spent 6 % of their time in such
// one-stream walks: docs/performance.md "GEMM tasks: panels in pairs").
inline int64_t Grain(int64_t bytes_per_panel) {
  const int64_t grain = CeilDiv(kMinBytesPerTask, std::max<int64_t>(1, bytes_per_panel));
  return std::max<int64_t>(2, CeilDiv(grain, 2) * 2);
}

// Runs run(begin, end) over a GEMM's num_tasks tasks on the pool, claimed
// dynamically with at least `grain` tasks per claim: from both ends of the
// task space when its tiles span several row blocks, so that each thread
// starts on row blocks of its own instead of both sharing the first one's
// activation rows (at M 128, FP8, two threads: +5-9 % in five interleaved
// runs; docs/performance.md "Claims from both ends"); from the front
// otherwise (a decode step's single row block: nothing to keep apart).
template <typename Run>
void DispatchTasks(ThreadPool* pool, int64_t num_tasks, int64_t grain, bool several_row_blocks,
                   const Run& run) {
  if (pool == nullptr || pool->num_threads() == 1 || num_tasks < 2 * grain) {
    if (num_tasks > 0) run(0, num_tasks);
    return;
  }
  if (several_row_blocks) {
    pool->ParallelForDynamicBothEnds(num_tasks, grain, run);
  } else {
    pool->ParallelForDynamic(num_tasks, grain, run);
  }
}

// Runs kernel(tile) over an [m, n] output split into panels of `width`
// columns and blocks of kRowBlock rows (task = row block · num_panels +
// panel), so narrow outputs of long batches still use every thread.  Any
// split gives the same bits: rows and columns are computed independently.
// Tasks are claimed dynamically (guided chunks of at least the grain): on a
// shared machine a worker that wakes late or is preempted no longer holds the
// whole call up for its static half.
template <typename Kernel>
void ForEachTile(ThreadPool* pool, int64_t m, int64_t n, int64_t width, int64_t bytes_per_panel,
                 const Kernel& kernel) {
  const int64_t num_panels = CeilDiv(n, width);
  const int64_t num_tasks = num_panels * CeilDiv(m, cpu::kRowBlock);
  const auto run = [&](int64_t begin, int64_t end) {
    while (begin < end) {
      const int64_t row_block = begin / num_panels;
      const int64_t panel = begin % num_panels;
      const int64_t count = std::min(num_panels - panel, end - begin);
      kernel(cpu::Tile{row_block * cpu::kRowBlock, std::min(m, (row_block + 1) * cpu::kRowBlock),
                       panel, panel + count});
      begin += count;
    }
  };
  DispatchTasks(pool, num_tasks, Grain(bytes_per_panel), m > cpu::kRowBlock, run);
}

// The activations as FP32, in this thread's reusable array (kernels/scratch.h):
// one array for all GEMM entry points, since a GEMM never runs inside another
// on the same thread.  It grows to the largest call (a prefill chunk) and stays.
float* Activations(int64_t n);

// Runs fn(row) for every row in parallel: preparing the activations of a
// long batch is O(M·K) work that would otherwise run on one thread while the
// others wait.  Each row is written by exactly one task.
template <typename Fn>
void ForEachRow(ThreadPool* pool, int64_t m, int64_t k, const Fn& fn) {
  constexpr int64_t kMinElementsPerTask = 32 * 1024;
  ParallelFor(pool, m, CeilDiv(kMinElementsPerTask, std::max<int64_t>(k, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) fn(r);
              });
}

// The form a block-scaled kernel reads its activations in: FP32 values
// ×2^8 (the FP8 FMA kernel), BF16 values block-major (the FP8 BF16 dot
// kernel: cpu::Fp8DotActivationsScalar), the same times their scales
// (kFp8DotScaled: Fp8GemmArgs::x_scaled), FP4 records, or scaled BF16
// values block-major (the FP4 BF16 dot kernel:
// cpu::Fp4DotActivationsScalar).  Each takes at most the bytes of [m, in]
// floats.
enum class ActivationForm { kFp8Fma, kFp8Dot, kFp8DotScaled, kFp4, kFp4Dot };

// Row r of [m, in] activation codes (x_scales [m, in/128]) in `form` into
// out, the [m, in] array of that form.
void PrepareActivationRow(ActivationForm form, const uint8_t* x_codes, const float* x_scales,
                          int64_t m, int64_t in, float* out, int64_t r);

// Points FP4 kernel args at their activations in `buffer`, in the form the
// chosen kernel reads.
ActivationForm SetFp4Activations(bool dot, float* buffer, cpu::Fp4GemmArgs* args);

// The form the chosen FP8 kernel reads [m, w.in] activations with these
// scales in: the dot kernel's with the scales folded in where they fold.
ActivationForm Fp8ActivationForm(bool dot, const float* x_scales, int64_t m, const Fp8Weight& w);

// Points FP8 kernel args at their activations in `buffer`, in `form`.
void SetFp8Activations(ActivationForm form, float* buffer, cpu::Fp8GemmArgs* args);

// A GEMM's activation rows prepared by its own tasks, a row block at a time
// where a tile first needs it, instead of all rows in a pass of their own
// before the tiles: one dispatch instead of two, and a row block is written
// just before its tiles read it, from the L2 of the thread that wrote it,
// rather than [m, in] values going out to the L3 and coming back
// (docs/performance.md "Activations prepared by the GEMM's tasks").
// Threads that need the same row block at once share its rows (claims of
// kClaimRows), then wait for the rest: a row is a microsecond or so of work.
class RowBlockPreparation {
 public:
  // Counters for num_blocks row blocks, in this thread's scratch (one GEMM
  // at a time per calling thread, as Activations), reset; the pool's
  // dispatch publishes them to the workers.
  explicit RowBlockPreparation(int64_t num_blocks)
      : blocks_(ScratchArray<Counters, Counters>::Get(static_cast<size_t>(num_blocks))) {
    for (int64_t b = 0; b < num_blocks; ++b) {
      blocks_[b].next.store(0, std::memory_order_relaxed);
      blocks_[b].done.store(0, std::memory_order_relaxed);
    }
  }

  // Returns once each of the tile's rows (its row block: [row_begin,
  // row_end)) has been through prepare_row(r), on this thread or another,
  // with its writes visible; `block` numbers the row block among all the
  // call's.
  template <typename Fn>
  void Ensure(int64_t block, const cpu::Tile& t, const Fn& prepare_row) const {
    const int64_t first = t.row_begin;
    const auto rows = static_cast<int32_t>(t.row_end - t.row_begin);
    Counters& c = blocks_[block];
    if (c.done.load(std::memory_order_acquire) == rows) return;
    for (int32_t r; (r = c.next.fetch_add(kClaimRows, std::memory_order_relaxed)) < rows;) {
      const int32_t end = std::min(rows, r + kClaimRows);
      for (int32_t i = r; i < end; ++i) prepare_row(first + i);
      // Release: a thread that reads `rows` here sees every row's values
      // (the increments form one release sequence).
      c.done.fetch_add(end - r, std::memory_order_release);
    }
    for (int spins = 0; c.done.load(std::memory_order_acquire) != rows; ++spins) {
      if (spins < 1024) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  // Rows per claim: fewer round trips of the counters' line between cores
  // than one row per claim, and a register tile's rows mostly from one
  // writer.
  static constexpr int32_t kClaimRows = 8;
  struct Counters {
    std::atomic<int32_t> next;  // rows claimed
    std::atomic<int32_t> done;  // rows prepared
  };
  Counters* blocks_;
};

// The row count from which FP4 tiles take the outer-product kernel.
int64_t Fp4OuterMinRows();

using Fp4KernelFn = void (*)(const cpu::Fp4GemmArgs& a, const cpu::Tile& t);

// The FP4 panel kernel for this CPU (the AVX-512 one needs VNNI, or its
// VNNI-free twin; with VBMI too, the VBMI one: all give the same bits).
Fp4KernelFn Fp4Kernel(const cpu::GemmKernels& simd);

// Whether this CPU runs FP4 weights whose scales fit on the BF16 dot kernel.
bool Fp4DotAvailable(const cpu::GemmKernels& simd);

// Whether the FP4 BF16 dot kernel runs w (in the layout the kernels read).
bool Fp4Dot(const cpu::GemmKernels& simd, const Fp4Weight& w);

// The FP8 panel kernel for this CPU: with AVX512-BF16 and VBMI the BF16
// dot one (its activations are BF16, Fp8GemmArgs::xh), else the FMA one.
struct Fp8Choice {
  void (*kernel)(const cpu::Fp8GemmArgs& a, const cpu::Tile& t);
  bool dot;
};
Fp8Choice Fp8Kernel(const cpu::GemmKernels& simd);

// The FP8 BF16 dot kernel reads weights in the panel layout, the FMA kernel
// and the scalar reference in rows.  The model packs its weights for the
// kernel it will run; a weight in the other layout (tests, tools, a kernel
// switched after load) is converted per call into this thread's scratch.
struct Fp8RepackTag {};

// Bytes w needs converted for a kernel that reads panels (`panels`) or rows:
// 0 when it is in that layout already.
int64_t Fp8RepackBytes(const Fp8Weight& w, bool panels);

// w as such a kernel reads it: itself, or converted at `at`
// (Fp8RepackBytes(w, panels) bytes).
Fp8Weight Fp8ForKernel(const Fp8Weight& w, bool panels, uint8_t* at);

// Fp8ForKernel into this thread's scratch (one weight per call).
Fp8Weight Fp8ForKernel(const Fp8Weight& w, bool panels);

// The SIMD kernels read FP4 weights in the panel layout only.  The model
// packs its weights so at load; a weight still in the checkpoint's rows
// (tests, tools) is packed per call into this thread's scratch.
struct Fp4RepackTag {};

// Bytes w needs packed per call: 0 when it is in the panel layout already.
int64_t Fp4RepackBytes(const Fp4Weight& w);

// w as the kernels read it: itself, or packed at `at` (Fp4RepackBytes(w) bytes).
Fp4Weight Fp4ForKernels(const Fp4Weight& w, uint8_t* at);

}  // namespace dsv4::kernels
