// The kernels allocate no buffers per call (docs/kernels.md "Scratch memory"):
// after one warm-up call, a repeat call of every kernel that needs temporary
// arrays makes no heap allocation of 1 KiB or more, on every ISA (the whole
// decode step, small allocations included: model_alloc_test).  Also the
// ScratchArray contract itself.  The global operator new of this binary
// counts (testing/alloc_counter.h).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "kernels/attention.h"
#include "kernels/compressor.h"
#include "kernels/gemm.h"
#include "kernels/hadamard.h"
#include "kernels/indexer.h"
#include "kernels/mhc.h"
#include "kernels/rope.h"
#include "kernels/scratch.h"
#include "ops_test_util.h"
#include "testing/alloc_counter.h"

namespace dsv4::kernels {
namespace {

// Runs fn once to warm up, then again counting allocations of 1 KiB or more.
template <typename Fn>
int64_t LargeAllocationsOfRepeat(Fn fn) {
  fn();
  return testing::CountAllocations(fn, 1024);
}

TEST(KernelAllocations, RepeatCallsAllocateNoBuffers) {
  const int64_t m = 16, k = 1024, n = 256;
  std::vector<uint8_t> codes(m * k, 0x38), wcodes(n * k, 0x30), wscales(n * k, 127);
  std::vector<float> xs(m * k / 128, 1.0f), yf(m * n), wf(n * k, 0.5f);
  std::vector<bf16> x(m * k, F32ToBf16(0.5f)), wb(n * k, F32ToBf16(0.25f)), y(m * n);
  const Fp8Weight w8{wcodes.data(), wscales.data(), n, k};
  const Fp4Weight w4{wcodes.data(), wscales.data(), n, k};
  // Attention / indexer / mHC / RoPE / Hadamard / pooling at small decode shapes.
  const int64_t heads = 8, dim = 128, rows = 64;
  std::vector<bf16> q(2 * heads * dim, F32ToBf16(0.1f)), kv(rows * dim, F32ToBf16(0.2f));
  std::vector<const bf16*> kv_rows(2 * rows);
  for (int64_t i = 0; i < 2 * rows; ++i) kv_rows[i] = kv.data() + (i % rows) * dim;
  std::vector<float> sink(heads, 0.0f), score(2 * rows), fn(4 * 1024, 0.01f), mixes(8);
  std::vector<bf16> o(2 * heads * dim), hw(2 * heads, F32ToBf16(1.0f)), hx(2 * 1024);
  const std::vector<int64_t> entries = {rows, rows / 2}, positions = {5, 9};
  std::vector<int32_t> top(8);
  std::vector<float> freqs(32, 0.01f), ring(128 * dim, 0.5f);
  std::vector<const float*> ring_rows(128, ring.data());
  std::vector<bf16> pooled(dim);
  ThreadPool pool(2);
  for (kernels::Isa isa : testing::IsasToTest()) {
    testing::ScopedIsa scoped(isa);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const std::string where = std::string(IsaName(isa)) + (p ? " pool" : " caller");
      EXPECT_EQ(0, LargeAllocationsOfRepeat([&] {
                  Fp8Gemm(codes.data(), xs.data(), m, w8, y.data(), p);
                  Fp4Gemm(codes.data(), xs.data(), m, w4, y.data(), p);
                  GemmBf16(x.data(), k, m, k, wb.data(), n, y.data(), n, p);
                  GemmBf16F32(x.data(), m, k, wb.data(), n, yf.data(), p);
                  GemmBf16F32Approx(x.data(), m, k, wb.data(), n, yf.data(), p);
                  GemmBf16xF32(x.data(), m, k, wf.data(), n, yf.data(), p);
                  const BlockScaledGemm batch[] = {
                      {codes.data(), xs.data(), m - 1, &w8, nullptr, y.data()},
                      {codes.data(), xs.data(), 1, nullptr, &w4, y.data() + (m - 1) * n}};
                  BlockScaledGemmBatch(batch, 2, p);
                }))
          << "GEMMs, " << where;
      if (isa == Isa::kScalar) continue;  // the scalar references are oracles
      EXPECT_EQ(0, LargeAllocationsOfRepeat([&] {
                  SparseAttention(q.data(), 2, heads, dim, kv_rows.data(), rows, sink.data(), 0.1f,
                                  o.data(), p);
                  IndexerScores(q.data(), 2, heads, dim, hw.data(), kv_rows.data(), rows,
                                entries.data(), score.data(), p);
                  TopKDescending(score.data(), rows, 8, top.data());
                  HcMixes(hx.data(), 2, 1024, fn.data(), 4, 1e-6f, mixes.data(), p);
                  ApplyRope(q.data(), 2, heads, dim, 64, positions.data(), freqs.data(), false, p);
                  HadamardBf16(q.data(), 2 * heads, dim, p);
                  SoftmaxPool(ring_rows.data(), ring_rows.data(), 128, dim, pooled.data());
                }))
          << "ops, " << where;
    }
  }
}

struct TagA {};
struct TagB {};
using ScratchA = ScratchArray<TagA, float>;
using ScratchB = ScratchArray<TagB, float>;

TEST(ScratchArray, ReusesGrowsAndSeparatesTagsAndThreads) {
  float* a = ScratchA::Get(100);
  EXPECT_EQ(ScratchA::Get(50), a);  // smaller: same storage
  EXPECT_NE(ScratchB::Get(10), a);  // another tag: other storage
  float* grown = ScratchA::Get(1000);
  grown[999] = 1.0f;  // the whole request is usable
  EXPECT_EQ(ScratchA::Get(1000), grown);
  float* other = nullptr;
  std::thread([&] { other = ScratchA::Get(1000); }).join();
  EXPECT_NE(other, grown);  // another thread: its own array
  EXPECT_NE(ScratchA::Get(0), nullptr);
}

}  // namespace
}  // namespace dsv4::kernels
