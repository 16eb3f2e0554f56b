// The block-scaled linear layers (FP8 and MXFP4 weights against FP8
// activation codes): single GEMMs and BlockScaledGemmBatch, which runs
// several (a MoE step's gate/up GEMMs of every selected expert, then their
// down GEMMs) in one task space.  Each prepares its activations inside its
// own tasks, a row block at a time (RowBlockPreparation), and splits the
// output into fixed column panels and row blocks over the thread pool; an
// element's arithmetic never depends on which task computes it, so results
// do not depend on the thread count.  Design notes: docs/kernels.md.
#include "base/logging.h"
#include "kernels/gemm_driver.h"
#include "kernels/ref/gemm_ref.h"

namespace dsv4::kernels {

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
  uint8_t* repacked =
      ScratchArray<Fp4RepackTag, uint8_t>::Get(static_cast<size_t>(Fp4RepackBytes(w)));
  cpu::Fp4GemmArgs args{nullptr, x_scales, m, Fp4ForKernels(w, repacked), y, Fp4OuterMinRows()};
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
      repack_bytes += Fp4RepackBytes(*g.fp4);
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
      e.fp4 = cpu::Fp4GemmArgs{nullptr, g.x_scales,       g.m, Fp4ForKernels(*g.fp4, repacked),
                               g.y,     Fp4OuterMinRows()};
      repacked += Fp4RepackBytes(*g.fp4);
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
  bool several_row_blocks = false;
  for (int64_t i = 0; i < count; ++i) several_row_blocks |= gemms[i].m > cpu::kRowBlock;
  DispatchTasks(pool, tasks, Grain(min_panel_bytes), several_row_blocks, run);
}

}  // namespace dsv4::kernels
