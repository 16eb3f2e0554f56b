// Dispatch and driver of the linear-layer kernels: prepares the activations
// once per call (the block-scaled GEMMs: a row block at a time, by the tasks
// that first need it), and splits the output into fixed column panels (and
// row blocks) over the thread pool.  An element's arithmetic never depends on
// which task computes it, so results do not depend on the thread count.
// Design notes: docs/kernels.md.
#include "kernels/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/cpu_features.h"
#include "base/logging.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/gemm_ref.h"
#include "kernels/scratch.h"

namespace dsv4::kernels {

namespace {

// Each thread's share should stream at least this much weight data, or the
// wake-up costs more than it saves.
constexpr int64_t kMinBytesPerTask = 64 * 1024;

// The one place that picks a GEMM instruction set: the active ISA's kernel
// table, or null for the scalar reference.  A new ISA is a new table here
// (docs/kernels.md "Writing a kernel once").
const cpu::GemmKernels* SimdKernels() {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return &cpu::kGemmKernelsAvx512;
    case Isa::kAvx2:
      return &cpu::kGemmKernelsAvx2;
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Panels per claimed chunk of a GEMM's tasks: enough bytes to pay for a
// wake-up, and even: the kernels walk panels in pairs (two streams per thread
// at 1-2 rows, two panels per register tile), and an odd chunk left a panel
// to walk alone (the FP8 decode GEMVs spent 6 % of their time in such
// one-stream walks: docs/performance.md "GEMM tasks: panels in pairs").
int64_t Grain(int64_t bytes_per_panel) {
  const int64_t grain = CeilDiv(kMinBytesPerTask, std::max<int64_t>(1, bytes_per_panel));
  return std::max<int64_t>(2, CeilDiv(grain, 2) * 2);
}

// Decoded activation codes: e4m3 value · `factor` for each code byte.
std::array<float, 256> E4M3Table(float factor) {
  std::array<float, 256> t;
  for (int c = 0; c < 256; ++c) t[c] = E4M3ToF32(static_cast<uint8_t>(c)) * factor;
  return t;
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
  const int64_t grain = Grain(bytes_per_panel);
  if (pool == nullptr || pool->num_threads() == 1 || num_tasks < 2 * grain) {
    if (num_tasks > 0) run(0, num_tasks);
    return;
  }
  pool->ParallelForDynamic(num_tasks, grain, run);
}

// The activations as FP32, in this thread's reusable array (kernels/scratch.h):
// one array for all GEMM entry points, since a GEMM never runs inside another
// on the same thread.  It grows to the largest call (a prefill chunk) and stays.
struct GemmActivationsTag {};
float* Activations(int64_t n) {
  return ScratchArray<GemmActivationsTag, float>::Get(static_cast<size_t>(n));
}

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

// FP8 GEMM activations, one row: each e4m3 code's value ×2^8, which
// compensates the kernels' FP16 route for the weights (gemm_cpu.h).
void DecodeFp8Row(const uint8_t* codes, int64_t in, float* x) {
  static const std::array<float, 256> kTable = E4M3Table(256.0f);
  for (int64_t i = 0; i < in; ++i) x[i] = kTable[codes[i]];
}

// e4m3 values as integers: code -> value·2^9 (448·2^9 < 2^18); NaN codes
// (0x7f, 0xff) -> 0, flagged separately.
std::array<int32_t, 256> E4M3IntTable() {
  std::array<int32_t, 256> t;
  for (int c = 0; c < 256; ++c) {
    const float v = E4M3ToF32(static_cast<uint8_t>(c));
    t[c] = (c & 0x7f) == 0x7f ? 0 : static_cast<int32_t>(v * 512.0f);
  }
  return t;
}

// One record (cpu::Fp4GemmArgs in gemm_cpu.h) from a block's 128 codes:
// three signed byte planes of the codes' integer values a = p0 + 2^8·p1 +
// 2^16·p2 (p0, p1 signed bytes; a - p0 is a multiple of 2^8, so the
// arithmetic shifts below divide exactly), each plane the block's even
// elements, then its odd ones; the 32-block offsets 12·Σa; the NaN
// flag; and, when every a is a multiple of 8, the planes of a/8 (plane 2
// zero) with the 2-plane flag and unit.  The reference for the AVX-512
// builder (cpu/fp4_records_avx512.cc: the same bytes, ~3x faster), and the
// builder where the ISA has none: simple loops over the output positions,
// 4.3 µs per 1,024 elements here (6.1 with per-element plane writes through
// divisions before).
void BuildFp4Record(const uint8_t* codes, const int32_t* int_of, uint8_t* rec) {
  int32_t a[128];
  int32_t nan = 0, low_bits = 0;
  for (int64_t e = 0; e < 128; ++e) {
    a[e] = int_of[codes[e]];
    nan |= (codes[e] & 0x7f) == 0x7f ? 1 : 0;
    low_bits |= a[e];
  }
  const int32_t shift = (low_bits & 7) == 0 ? 3 : 0;  // exact: a >> 3 == a / 8
  int32_t offset[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < 128; ++e) {
    a[e] >>= shift;
    offset[e / 32] += a[e];
  }
  for (int32_t& o : offset) o *= 12;
  auto* planes0 = reinterpret_cast<int8_t*>(rec);
  const auto put = [planes0](int64_t at, int32_t v) {
    const auto b0 = static_cast<int8_t>(v);
    const int32_t r1 = (v - b0) >> 8;
    const auto b1 = static_cast<int8_t>(r1);
    planes0[at] = b0;
    planes0[128 + at] = b1;
    planes0[256 + at] = static_cast<int8_t>((r1 - b1) >> 8);
  };
  for (int64_t i = 0; i < 64; ++i) put(i, a[2 * i]);           // even elements
  for (int64_t i = 0; i < 64; ++i) put(64 + i, a[2 * i + 1]);  // odd ones
  const int32_t planes = shift == 0 ? 3 : 2;
  const float unit = shift == 0 ? 0x1p-10f : 0x1p-7f;
  std::memcpy(rec + cpu::kFp4OffsetAt, offset, sizeof offset);
  std::memcpy(rec + cpu::kFp4NanAt, &nan, sizeof nan);
  std::memcpy(rec + cpu::kFp4PlanesAt, &planes, sizeof planes);
  std::memcpy(rec + cpu::kFp4UnitAt, &unit, sizeof unit);
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
                          int64_t m, int64_t in, float* out, int64_t r) {
  switch (form) {
    case ActivationForm::kFp8Fma:
      return DecodeFp8Row(x_codes + r * in, in, out + r * in);
    case ActivationForm::kFp8Dot:
    case ActivationForm::kFp8DotScaled: {
      const cpu::GemmKernels* simd = SimdKernels();
      const auto decode = simd != nullptr && simd->fp8_dot_activations != nullptr
                              ? simd->fp8_dot_activations
                              : &cpu::Fp8DotActivationsScalar;
      const float* scales =
          form == ActivationForm::kFp8DotScaled ? x_scales + r * (in / 128) : nullptr;
      const cpu::DotActivationLayout l(m, in);
      return decode(x_codes + r * in, scales, in, l.rows, r % cpu::kRowBlock,
                    reinterpret_cast<bf16*>(out) + l.BlockOffset(r));
    }
    case ActivationForm::kFp4: {
      const cpu::GemmKernels* simd = SimdKernels();
      const auto build = simd != nullptr && simd->fp4_records != nullptr
                             ? simd->fp4_records
                             : &cpu::BuildFp4RecordsScalar;
      return build(x_codes + r * in, in,
                   reinterpret_cast<uint8_t*>(out) + r * (in / 128) * cpu::kFp4RecordBytes);
    }
    case ActivationForm::kFp4Dot: {
      const cpu::GemmKernels* simd = SimdKernels();
      const auto decode = simd != nullptr && simd->fp4_dot_activations != nullptr
                              ? simd->fp4_dot_activations
                              : &cpu::Fp4DotActivationsScalar;
      const cpu::DotActivationLayout l(m, in);
      return decode(x_codes + r * in, x_scales + r * (in / 128), in, l.rows, r % cpu::kRowBlock,
                    reinterpret_cast<bf16*>(out) + l.BlockOffset(r));
    }
  }
}

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

// True when the environment variable `name` is set to `value`.
bool EnvIs(const char* name, const char* value) {
  const char* env = std::getenv(name);
  return env != nullptr && std::strcmp(env, value) == 0;
}

// DSV4_FP8_KERNEL=fma keeps the FP8 GEMMs on the FMA kernel where the BF16
// dot one would run (a diagnostic switch like DSV4_ISA: same results within
// rounding, for side-by-side timing and bisecting).
std::atomic<bool>& Fp8WithoutBf16DotSlot() {
  static std::atomic<bool> on{EnvIs("DSV4_FP8_KERNEL", "fma")};
  return on;
}

std::atomic<bool>& Fp4WithoutVnniSlot() {
  static std::atomic<bool> on{false};
  return on;
}

std::atomic<bool>& Fp4WithoutVbmiSlot() {
  static std::atomic<bool> on{false};
  return on;
}

// DSV4_FP4_KERNEL=rows keeps every FP4 tile on the row kernels (no outer
// products): the same bits, for side-by-side timing like DSV4_FP8_KERNEL.
std::atomic<bool>& Fp4RowKernelsSlot() {
  static std::atomic<bool> on{EnvIs("DSV4_FP4_KERNEL", "rows")};
  return on;
}

// DSV4_FP4_KERNEL=exact (or rows) keeps the FP4 GEMMs on the exact integer
// kernels where the BF16 dot one would run: other bits within rounding, for
// side-by-side timing and bisecting.
std::atomic<bool>& Fp4WithoutBf16DotSlot() {
  static std::atomic<bool> on{EnvIs("DSV4_FP4_KERNEL", "exact") ||
                              EnvIs("DSV4_FP4_KERNEL", "rows")};
  return on;
}

// The row count from which FP4 tiles take the outer-product kernel.
int64_t Fp4OuterMinRows() {
  return Fp4RowKernelsSlot().load(std::memory_order_relaxed) ? INT64_MAX : cpu::kFp4OuterMinRows;
}

// The FP4 panel kernel for this CPU (the AVX-512 one needs VNNI, or its
// VNNI-free twin; with VBMI too, the VBMI one: all give the same bits).
auto Fp4Kernel(const cpu::GemmKernels& simd) {
  static const CpuFeatures cpu = CpuFeatures::Detect();
  const bool without = !cpu.avx512vnni || Fp4WithoutVnniSlot().load(std::memory_order_relaxed);
  if (simd.fp4_without_vnni != nullptr && without) return simd.fp4_without_vnni;
  const bool vbmi = cpu.avx512vbmi && !Fp4WithoutVbmiSlot().load(std::memory_order_relaxed);
  return simd.fp4_vbmi != nullptr && vbmi ? simd.fp4_vbmi : simd.fp4;
}

// Whether this CPU runs FP4 weights whose scales fit on the BF16 dot kernel.
bool Fp4DotAvailable(const cpu::GemmKernels& simd) {
  static const CpuFeatures cpu = CpuFeatures::Detect();
  return simd.fp4_bf16dot != nullptr && cpu.avx512bf16 && cpu.avx512vbmi &&
         !Fp4WithoutBf16DotSlot().load(std::memory_order_relaxed);
}

// Whether the FP4 BF16 dot kernel runs w (in the layout the kernels read).
bool Fp4Dot(const cpu::GemmKernels& simd, const Fp4Weight& w) {
  return w.layout == Fp4Layout::kPanels && Fp4DotAvailable(simd) && Fp4PanelsFitBf16(w);
}

// Points a BF16 dot kernel's args (cpu::Fp8GemmArgs, cpu::Fp4GemmArgs) at
// BF16 activations in `buffer`, in the cpu::DotActivationLayout that
// PrepareActivationRow writes.
template <typename Args>
void SetDotActivations(float* buffer, Args* args) {
  const cpu::DotActivationLayout l(args->m, args->w.in);
  args->xh = reinterpret_cast<bf16*>(buffer);
  args->ldx = l.ldx;
  args->ldkb = l.ldkb;
  args->ldrb = l.ldrb;
}

// Points FP4 kernel args at their activations in `buffer`, in the form the
// chosen kernel reads.
ActivationForm SetFp4Activations(bool dot, float* buffer, cpu::Fp4GemmArgs* args) {
  if (dot) {
    SetDotActivations(buffer, args);
    return ActivationForm::kFp4Dot;
  }
  args->x = reinterpret_cast<const uint8_t*>(buffer);  // records
  return ActivationForm::kFp4;
}

// The FP8 panel kernel for this CPU: with AVX512-BF16 and VBMI the BF16
// dot one (its activations are BF16, Fp8GemmArgs::xh), else the FMA one.
struct Fp8Choice {
  void (*kernel)(const cpu::Fp8GemmArgs& a, const cpu::Tile& t);
  bool dot;
};
Fp8Choice Fp8Kernel(const cpu::GemmKernels& simd) {
  static const CpuFeatures cpu = CpuFeatures::Detect();
  const bool dot = simd.fp8_bf16dot != nullptr && cpu.avx512bf16 && cpu.avx512vbmi &&
                   !Fp8WithoutBf16DotSlot().load(std::memory_order_relaxed);
  return dot ? Fp8Choice{simd.fp8_bf16dot, true} : Fp8Choice{simd.fp8, false};
}

}  // namespace

// Whether the [m, w.in/128] activation scales fold exactly into the BF16
// dot kernel's values against w (cpu::kFp8FoldMinScale): powers of two in
// the range, and no product with one of w's scales above 2^127.  act_quant's
// always do, short of activations near the BF16 maximum.  Scales up to 1
// cannot reach 2^127 with any E8M0 weight scale (at most 2^127), so the
// weight's scales are read only when some activation scale exceeds 1.
bool cpu::Fp8ScalesFold(const float* x_scales, int64_t m, const Fp8Weight& w) {
  int max_exponent = -127;
  for (int64_t i = 0; i < m * (w.in / 128); ++i) {
    const float s = x_scales[i];
    if (!(s >= cpu::kFp8FoldMinScale && s <= cpu::kFp8FoldMaxScale) ||
        (std::bit_cast<uint32_t>(s) & 0x7fffff) != 0) {
      return false;
    }
    max_exponent = std::max(max_exponent, static_cast<int>(std::bit_cast<uint32_t>(s) >> 23) - 127);
  }
  if (max_exponent <= 0) return true;
  const int64_t num_scales = CeilDiv(w.out, 128) * (w.in / 128);
  for (int64_t i = 0; i < num_scales; ++i) {
    const int e = w.scales[i];  // 2^(e - 127); 255 is NaN, NaN either way
    if (e != 255 && e - 127 + max_exponent > 127) return false;
  }
  return true;
}

namespace {

// The form the chosen FP8 kernel reads [m, w.in] activations with these
// scales in: the dot kernel's with the scales folded in where they fold.
ActivationForm Fp8ActivationForm(bool dot, const float* x_scales, int64_t m, const Fp8Weight& w) {
  if (!dot) return ActivationForm::kFp8Fma;
  return cpu::Fp8ScalesFold(x_scales, m, w) ? ActivationForm::kFp8DotScaled
                                            : ActivationForm::kFp8Dot;
}

// Points FP8 kernel args at their activations in `buffer`, in `form`.
void SetFp8Activations(ActivationForm form, float* buffer, cpu::Fp8GemmArgs* args) {
  if (form == ActivationForm::kFp8Fma) {
    args->x = buffer;
    return;
  }
  SetDotActivations(buffer, args);
  args->x_scaled = form == ActivationForm::kFp8DotScaled;
}

// The FP8 BF16 dot kernel reads weights in the panel layout, the FMA kernel
// and the scalar reference in rows.  The model packs its weights for the
// kernel it will run; a weight in the other layout (tests, tools, a kernel
// switched after load) is converted per call into this thread's scratch.
struct Fp8RepackTag {};

// Bytes w needs converted for a kernel that reads panels (`panels`) or rows:
// 0 when it is in that layout already.
int64_t Fp8RepackBytes(const Fp8Weight& w, bool panels) {
  if (panels == (w.layout == Fp8Layout::kPanels)) return 0;
  return panels ? Fp8PanelBytes(w.out, w.in) : w.out * w.in;
}

// w as such a kernel reads it: itself, or converted at `at`
// (Fp8RepackBytes(w, panels) bytes).
Fp8Weight Fp8ForKernel(const Fp8Weight& w, bool panels, uint8_t* at) {
  if (panels == (w.layout == Fp8Layout::kPanels)) return w;
  return panels ? PackFp8Panels(w, at) : UnpackFp8Rows(w, at);
}

// Fp8ForKernel into this thread's scratch (one weight per call).
Fp8Weight Fp8ForKernel(const Fp8Weight& w, bool panels) {
  const int64_t bytes = Fp8RepackBytes(w, panels);
  if (bytes == 0) return w;
  return Fp8ForKernel(w, panels,
                      ScratchArray<Fp8RepackTag, uint8_t>::Get(static_cast<size_t>(bytes)));
}

// The SIMD kernels read FP4 weights in the panel layout only.  The model
// packs its weights so at load; a weight still in the checkpoint's rows
// (tests, tools) is packed per call into this thread's scratch.
struct Fp4RepackTag {};

// Bytes w needs packed per call: 0 when it is in the panel layout already.
int64_t RepackBytes(const Fp4Weight& w) {
  if (w.layout == Fp4Layout::kPanels) return 0;
  return Fp4PanelPackedBytes(w.out, w.in) + Fp4PanelScaleBytes(w.out, w.in);
}

// w as the kernels read it: itself, or packed at `at` (RepackBytes(w) bytes).
Fp4Weight ForKernels(const Fp4Weight& w, uint8_t* at) {
  if (w.layout == Fp4Layout::kPanels) return w;
  return PackFp4Panels(w, at, at + Fp4PanelPackedBytes(w.out, w.in));
}

}  // namespace

// FP4 GEMM activations, one row: one record per 128-element block (in/128
// records at rec).
void cpu::BuildFp4RecordsScalar(const uint8_t* codes, int64_t in, uint8_t* rec) {
  static const std::array<int32_t, 256> kInt = E4M3IntTable();
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    BuildFp4Record(codes + kb * 128, kInt.data(), rec + kb * cpu::kFp4RecordBytes);
  }
}

// FP8 GEMM activations for the BF16 dot kernel, row r of m: each code's
// value in BF16 (exact; times the block's power-of-two scale where scales
// is given, exact too), block-major (block kb of row r at (kb·m + r)·128):
// the kernel's register tiles read one block of several rows at a time,
// which in rows `in` elements apart (8 KB on Flash) would all fall in the
// same L1 sets.
void cpu::Fp8DotActivationsScalar(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                                  int64_t r, bf16* xh) {
  static const std::array<bf16, 256> kTable = [] {
    std::array<bf16, 256> t;
    for (int c = 0; c < 256; ++c) t[c] = F32ToBf16(E4M3ToF32(static_cast<uint8_t>(c)));
    return t;
  }();
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    bf16* block = xh + (kb * m + r) * 128;
    for (int64_t i = 0; i < 128; ++i) {
      const bf16 v = kTable[codes[kb * 128 + i]];
      block[i] = scales == nullptr ? v : F32ToBf16(Bf16ToF32(v) * scales[kb]);
    }
  }
}

// FP4 BF16 dot activations, row r of m: the FP8 dot kernel's values (the
// codes' BF16, so a NaN code keeps the sign and payload the SIMD decode
// gives it) times the block's scale, rounded to BF16; each 8 stored as K 0,
// 4, 1, 5, 2, 6, 3, 7 (the kernel pairs a chunk's weights K j and j + 4).
void cpu::Fp4DotActivationsScalar(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                                  int64_t r, bf16* xh) {
  Fp8DotActivationsScalar(codes, nullptr, in, m, r, xh);
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    bf16* block = xh + (kb * m + r) * 128;
    for (int64_t g = 0; g < 128; g += 8) {
      bf16 v[8];
      for (int64_t i = 0; i < 8; ++i) v[i] = F32ToBf16(Bf16ToF32(block[g + i]) * scales[kb]);
      for (int64_t j = 0; j < 4; ++j) {
        block[g + 2 * j] = v[j];
        block[g + 2 * j + 1] = v[4 + j];
      }
    }
  }
}

namespace cpu {
void UseFp4WithoutVnniForTesting(bool on) { Fp4WithoutVnniSlot().store(on); }
void UseFp4WithoutVbmiForTesting(bool on) { Fp4WithoutVbmiSlot().store(on); }
void UseFp4RowKernelsForTesting(bool on) { Fp4RowKernelsSlot().store(on); }
void UseFp8WithoutBf16DotForTesting(bool on) { Fp8WithoutBf16DotSlot().store(on); }
void UseFp4WithoutBf16DotForTesting(bool on) { Fp4WithoutBf16DotSlot().store(on); }
}  // namespace cpu

void Fp8Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp8Weight& w, bf16* y,
             ThreadPool* pool) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr) return ref::Fp8Gemm(x_codes, x_scales, m, Fp8ForKernel(w, false), y, pool);
  DSV4_CHECK(w.in % 128 == 0);
  if (m <= 0) return;
  const Fp8Choice fp8 = Fp8Kernel(*simd);
  cpu::Fp8GemmArgs args{nullptr, x_scales, m, Fp8ForKernel(w, fp8.dot), y};
  float* x = Activations(m * w.in);
  const ActivationForm form = Fp8ActivationForm(fp8.dot, x_scales, m, w);
  SetFp8Activations(form, x, &args);
  const RowBlockPreparation prepared(CeilDiv(m, cpu::kRowBlock));
  ForEachTile(pool, m, w.out, simd->panel, simd->panel * w.in, [&](const cpu::Tile& t) {
    prepared.Ensure(t.row_begin / cpu::kRowBlock, t, [&](int64_t r) {
      PrepareActivationRow(form, x_codes, x_scales, m, w.in, x, r);
    });
    fp8.kernel(args, t);
  });
}

bool Fp8GemmUsesBf16Dots() {
  const cpu::GemmKernels* simd = SimdKernels();
  return simd != nullptr && Fp8Kernel(*simd).dot;
}

void Fp4Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp4Weight& w, bf16* y,
             ThreadPool* pool) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr) return ref::Fp4Gemm(x_codes, x_scales, m, w, y, pool);
  DSV4_CHECK(w.in % 128 == 0);
  if (m <= 0) return;
  const int64_t width = simd->panel;
  static_assert(cpu::kFp4RecordBytes == 128 * sizeof(float));
  float* x = Activations(m * w.in);  // m·in/128 records, or [m, in] BF16
  uint8_t* repacked = ScratchArray<Fp4RepackTag, uint8_t>::Get(static_cast<size_t>(RepackBytes(w)));
  cpu::Fp4GemmArgs args{nullptr, x_scales, m, ForKernels(w, repacked), y, Fp4OuterMinRows()};
  const bool dot = Fp4Dot(*simd, args.w);
  const ActivationForm form = SetFp4Activations(dot, x, &args);
  const auto fp4 = dot ? simd->fp4_bf16dot : Fp4Kernel(*simd);
  const RowBlockPreparation prepared(CeilDiv(m, cpu::kRowBlock));
  ForEachTile(pool, m, w.out, width, width * w.in / 2, [&](const cpu::Tile& t) {
    prepared.Ensure(t.row_begin / cpu::kRowBlock, t, [&](int64_t r) {
      PrepareActivationRow(form, x_codes, x_scales, m, w.in, x, r);
    });
    fp4(args, t);
  });
}

bool Fp4GemmUsesBf16Dots(const Fp4Weight& w) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr) return false;
  if (w.layout == Fp4Layout::kPanels) return Fp4Dot(*simd, w);
  // As Fp4Gemm would pack it: the flag PackFp4Panels would set.
  return w.in % 128 == 0 && Fp4DotAvailable(*simd) &&
         Fp4ScalesFitBf16(w.scales, w.out * (w.in / 32));
}

namespace {

// A BlockScaledGemmBatch entry, prepared: its kernel arguments and where its
// tasks start in the batch's task space (tasks numbered as ForEachTile does).
struct BatchEntry {
  cpu::Fp8GemmArgs fp8;
  cpu::Fp4GemmArgs fp4;
  bool is_fp4 = false;
  int64_t num_panels = 0;
  int64_t first_task = 0;
  // Its own activation (not shared with an earlier entry): where it goes,
  // in which form, and the first of its row blocks among all entries' own.
  float* x = nullptr;
  ActivationForm form = ActivationForm::kFp4;
  int64_t first_block = 0;
  // The entry whose activation it reads: itself, or the earlier one it shares.
  int64_t owner = 0;
};

struct BatchEntriesTag {};

int64_t InOf(const BlockScaledGemm& g) { return g.fp4 != nullptr ? g.fp4->in : g.fp8->in; }

// Args (cpu::Fp8GemmArgs, cpu::Fp4GemmArgs) of an entry that reads an
// earlier entry's activations, in the same form, pointed at them.
template <typename Args>
void ShareActivations(const Args& from, Args* to) {
  to->x = from.x;
  to->xh = from.xh;
  to->ldx = from.ldx;
  to->ldkb = from.ldkb;
  to->ldrb = from.ldrb;
}

// The entry before i that reads the same activation in the same decoded
// form (entries[].form, set for all of them), or -1.
int64_t SharedActivation(const BlockScaledGemm* gemms, const BatchEntry* entries, int64_t i) {
  const BlockScaledGemm& g = gemms[i];
  for (int64_t j = 0; j < i; ++j) {
    const BlockScaledGemm& h = gemms[j];
    if (h.x_codes == g.x_codes && h.m == g.m && entries[j].form == entries[i].form &&
        InOf(h) == InOf(g)) {
      return j;
    }
  }
  return -1;
}

}  // namespace

void BlockScaledGemmBatch(const BlockScaledGemm* gemms, int64_t count, ThreadPool* pool) {
  const cpu::GemmKernels* simd = SimdKernels();
  if (simd == nullptr) {
    for (int64_t i = 0; i < count; ++i) {
      const BlockScaledGemm& g = gemms[i];
      if (g.fp4 != nullptr) {
        ref::Fp4Gemm(g.x_codes, g.x_scales, g.m, *g.fp4, g.y, pool);
      } else {
        ref::Fp8Gemm(g.x_codes, g.x_scales, g.m, Fp8ForKernel(*g.fp8, false), g.y, pool);
      }
    }
    return;
  }
  const int64_t width = simd->panel;
  const auto fp4 = Fp4Kernel(*simd);
  const Fp8Choice fp8 = Fp8Kernel(*simd);
  BatchEntry* entries = ScratchArray<BatchEntriesTag, BatchEntry>::Get(static_cast<size_t>(count));
  int64_t repack_bytes = 0, fp8_repack_bytes = 0;
  for (int64_t i = 0; i < count; ++i) {
    const BlockScaledGemm& g = gemms[i];
    DSV4_CHECK((g.fp4 != nullptr) != (g.fp8 != nullptr) && InOf(g) % 128 == 0 && g.m >= 0);
    entries[i] = BatchEntry{};
    if (g.fp4 != nullptr) {
      repack_bytes += RepackBytes(*g.fp4);
      entries[i].form =
          Fp4GemmUsesBf16Dots(*g.fp4) ? ActivationForm::kFp4Dot : ActivationForm::kFp4;
    } else {
      fp8_repack_bytes += Fp8RepackBytes(*g.fp8, fp8.dot);
      entries[i].form = Fp8ActivationForm(fp8.dot, g.x_scales, g.m, *g.fp8);
    }
  }
  int64_t floats = 0;  // activation floats of the distinct inputs
  for (int64_t i = 0; i < count; ++i) {
    if (SharedActivation(gemms, entries, i) < 0) floats += gemms[i].m * InOf(gemms[i]);
  }
  float* x = Activations(floats);
  uint8_t* repacked = ScratchArray<Fp4RepackTag, uint8_t>::Get(static_cast<size_t>(repack_bytes));
  uint8_t* fp8_repacked =
      ScratchArray<Fp8RepackTag, uint8_t>::Get(static_cast<size_t>(fp8_repack_bytes));
  int64_t next_x = 0, tasks = 0, min_panel_bytes = 0, own_blocks = 0;
  for (int64_t i = 0; i < count; ++i) {
    const BlockScaledGemm& g = gemms[i];
    BatchEntry& e = entries[i];
    const int64_t in = InOf(g);
    const int64_t shared = SharedActivation(gemms, entries, i);
    e.owner = shared < 0 ? i : shared;
    if (shared < 0 && g.m > 0) {  // prepared by the tasks, a row block at a time
      e.x = x + next_x;
      e.first_block = own_blocks;
      next_x += g.m * in;
      own_blocks += CeilDiv(g.m, cpu::kRowBlock);
    }
    e.is_fp4 = g.fp4 != nullptr;
    int64_t out = 0, panel_bytes = 0;
    if (e.is_fp4) {
      e.fp4 = cpu::Fp4GemmArgs{nullptr, g.x_scales,       g.m, ForKernels(*g.fp4, repacked),
                               g.y,     Fp4OuterMinRows()};
      repacked += RepackBytes(*g.fp4);
      if (shared >= 0) {
        ShareActivations(entries[shared].fp4, &e.fp4);
      } else {
        SetFp4Activations(e.form == ActivationForm::kFp4Dot, e.x, &e.fp4);
      }
      out = g.fp4->out;
      panel_bytes = width * in / 2;
    } else {
      e.fp8 = cpu::Fp8GemmArgs{nullptr, g.x_scales, g.m,
                               Fp8ForKernel(*g.fp8, fp8.dot, fp8_repacked), g.y};
      fp8_repacked += Fp8RepackBytes(*g.fp8, fp8.dot);
      if (shared >= 0) {
        ShareActivations(entries[shared].fp8, &e.fp8);
        e.fp8.x_scaled = entries[shared].fp8.x_scaled;  // the same form
      } else {
        SetFp8Activations(e.form, e.x, &e.fp8);
      }
      out = g.fp8->out;
      panel_bytes = width * in;
    }
    e.num_panels = CeilDiv(out, width);
    e.first_task = tasks;
    tasks += g.m > 0 ? e.num_panels * CeilDiv(g.m, cpu::kRowBlock) : 0;
    min_panel_bytes = i == 0 ? panel_bytes : std::min(min_panel_bytes, panel_bytes);
  }
  const RowBlockPreparation prepared(own_blocks);
  // Global task t belongs to the last entry whose first_task <= t; within
  // it, tasks are numbered as ForEachTile numbers them, so every entry runs
  // exactly the tiles its own call would.
  const auto run = [&](int64_t begin, int64_t end) {
    int64_t i = 0;
    while (begin < end) {
      while (i + 1 < count && entries[i + 1].first_task <= begin) ++i;
      const BatchEntry& e = entries[i];
      const int64_t m = e.is_fp4 ? e.fp4.m : e.fp8.m;
      const int64_t local = begin - e.first_task;
      const int64_t row_block = local / e.num_panels;
      const int64_t panel = local % e.num_panels;
      const int64_t n = std::min(e.num_panels - panel, end - begin);
      const cpu::Tile t{row_block * cpu::kRowBlock, std::min(m, (row_block + 1) * cpu::kRowBlock),
                        panel, panel + n};
      const BatchEntry& o = entries[e.owner];
      const BlockScaledGemm& g = gemms[e.owner];
      prepared.Ensure(o.first_block + row_block, t, [&](int64_t r) {
        PrepareActivationRow(o.form, g.x_codes, g.x_scales, g.m, InOf(g), o.x, r);
      });
      if (e.form == ActivationForm::kFp4Dot) {
        simd->fp4_bf16dot(e.fp4, t);
      } else if (e.is_fp4) {
        fp4(e.fp4, t);
      } else {
        fp8.kernel(e.fp8, t);
      }
      begin += n;
    }
  };
  const int64_t grain = Grain(min_panel_bytes);
  if (pool == nullptr || pool->num_threads() == 1 || tasks < 2 * grain) {
    if (tasks > 0) run(0, tasks);
    return;
  }
  pool->ParallelForDynamic(tasks, grain, run);
}

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
