#include "kernels/attention.h"

#include <algorithm>

#include "kernels/cpu/ops_cpu.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/scratch.h"

namespace dsv4::kernels {

// Work items are (token, head) pairs, split statically over the pool: a decode
// token's 64 heads spread over the threads, and a thread's consecutive heads
// of one token share each kv row pass (cpu::kAttnGroup at a time).  A head's
// arithmetic never depends on which heads share its group, so results are
// batch invariant.
void SparseAttention(const bf16* q, int64_t tokens, int64_t heads, int64_t dim,
                     const bf16* const* kv_rows, int64_t list_len, const float* sink, float scale,
                     bf16* o, ThreadPool* pool) {
  const cpu::OpsKernels* simd = cpu::ActiveOpsKernels();
  if (simd == nullptr) {
    ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
      const int64_t off = begin * heads * dim;
      ref::SparseAttention(q + off, end - begin, heads, dim, kv_rows + begin * list_len, list_len,
                           sink, scale, o + off);
    });
    return;
  }
  const cpu::AttnArgs args{q, heads, dim, kv_rows, list_len, sink, scale, o};
  const int64_t dim_pad = (dim + cpu::kAttnDimAlign - 1) / cpu::kAttnDimAlign * cpu::kAttnDimAlign;
  const int64_t scratch_floats = 2 * cpu::kAttnGroup * dim_pad + 2 * cpu::kAttnGroup * 64;
  const cpu::AttendHeadsFn attend = cpu::ActiveAttendHeads(*simd);
  ParallelFor(pool, tokens * heads, 1, [&](int64_t begin, int64_t end) {
    struct Tag {};
    float* scratch = ScratchArray<Tag, float>::Get(static_cast<size_t>(scratch_floats));
    for (int64_t i = begin; i < end;) {
      const int64_t t = i / heads;
      const int64_t h_begin = i % heads;
      const int64_t h_end = std::min(heads, h_begin + (end - i));
      attend(args, t, h_begin, h_end, scratch);
      i += h_end - h_begin;
    }
  });
}

bool SparseAttentionUsesBf16Dots() {
  const cpu::OpsKernels* simd = cpu::ActiveOpsKernels();
  return simd != nullptr && cpu::ActiveAttendHeads(*simd) == simd->attend_heads_bf16dot;
}

}  // namespace dsv4::kernels
