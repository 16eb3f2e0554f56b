// WeightStore's deferred FP4 packing (model/weights.h): the copies it makes
// after binding equal PackFp4Panels, over several batches and threads, and
// the source tensors dropped along the way stay readable.  (That a drop
// leaves the resident set: Checkpoint.DropResidentPagesKeepsBytesReadable.)
// And Fp8Linear's load-time FP8 panel copy (model/linear.h).
#include "model/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "kernels/quant.h"
#include "model/linear.h"
#include "model/workspace.h"
#include "testing/golden.h"

namespace dsv4 {
namespace {

// A weight tensor of the golden tiny-a checkpoint and its scale.
struct WeightAndScale {
  const TensorView* codes = nullptr;
  const TensorView* scales = nullptr;
};
WeightAndScale FindWeight(const checkpoint::Checkpoint& c, const std::string& name) {
  return {c.Find(name + ".weight"), c.Find(name + ".scale")};
}

TEST(WeightStore, DeferredPackingEqualsPackFp4PanelsAndDropsAfterItsCopies) {
  auto ckpt = checkpoint::Checkpoint::Open(testing::TestDataPath("golden/tiny-a"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const checkpoint::Checkpoint& c = **ckpt;
  const std::string name = "layers.0.ffn.experts.0.w1";
  const auto [codes, scales] = FindWeight(c, name);
  ASSERT_NE(codes, nullptr);
  ASSERT_NE(scales, nullptr);
  const kernels::Fp4Weight rows{codes->as<uint8_t>(), scales->as<uint8_t>(), codes->dim(0),
                                2 * codes->dim(1)};
  ASSERT_EQ(rows.in % 128, 0);
  const int64_t code_bytes = kernels::Fp4PanelPackedBytes(rows.out, rows.in);
  const int64_t scale_bytes = kernels::Fp4PanelScaleBytes(rows.out, rows.in);
  std::vector<uint8_t> want_codes(code_bytes), want_scales(scale_bytes);
  kernels::PackFp4Panels(rows, want_codes.data(), want_scales.data());

  // 150 copies (batches of 64, 64 and 22), as the model records them: the
  // copies of a tensor, then its drop.
  const std::vector<uint8_t> source(rows.packed, rows.packed + codes->nbytes());
  model::WeightStore store;
  std::vector<kernels::Fp4Weight> views;
  for (int i = 0; i < 150; ++i) {
    views.push_back(store.DeferPack(rows, store.Allocate<uint8_t>(code_bytes),
                                    store.Allocate<uint8_t>(scale_bytes)));
    if (i == 99 || i == 149) {
      store.DropAfterPacking(name + ".weight");
      store.DropAfterPacking(name + ".scale");
    }
  }
  store.PackDeferred(c, 3);
  for (const kernels::Fp4Weight& v : views) {
    ASSERT_EQ(v.layout, kernels::Fp4Layout::kPanels);
    ASSERT_EQ(std::memcmp(v.packed, want_codes.data(), want_codes.size()), 0);
    ASSERT_EQ(std::memcmp(v.scales, want_scales.data(), want_scales.size()), 0);
  }
  EXPECT_EQ(std::memcmp(rows.packed, source.data(), source.size()), 0);
  // Nothing is left to do: a second call copies and drops nothing.
  store.PackDeferred(c, 1);
}

// Where the FP8 GEMMs run on the BF16 dot kernel, Fp8Linear::Load defers a
// copy of the weight in its panel layout into the store, whose
// PackDeferred makes it and drops the mapped source (recorded in
// DroppedRanges, still readable); its forward equals the GEMM on the
// checkpoint's rows bit for bit.  Elsewhere it keeps the view.
TEST(Fp8Linear, LoadPacksForTheDotKernelAndDropsTheSource) {
  auto ckpt = checkpoint::Checkpoint::Open(testing::TestDataPath("golden/tiny-a"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const checkpoint::Checkpoint& c = **ckpt;
  const std::string name = "layers.0.attn.wq_a";
  const auto [codes, scales] = FindWeight(c, name);
  ASSERT_NE(codes, nullptr);
  ASSERT_NE(scales, nullptr);
  const int64_t out = codes->dim(0), in = codes->dim(1);
  model::WeightStore store;
  auto l = model::Fp8Linear::Load(c, name, out, in, store);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const kernels::Fp8Weight& w = l->weight();
  const auto at = reinterpret_cast<uintptr_t>(codes->data);
  const auto dropped_now = [&] {
    bool d = false;
    for (const auto& [begin, end] : c.DroppedRanges()) d |= begin <= at && at < end;
    return d;
  };
  EXPECT_FALSE(dropped_now()) << "dropped before the copy is made";
  store.PackDeferred(c, 1);
  const bool dropped = dropped_now();
  if (kernels::Fp8GemmUsesBf16Dots()) {
    EXPECT_EQ(w.layout, kernels::Fp8Layout::kPanels);
    EXPECT_NE(w.codes, codes->as<uint8_t>());
    EXPECT_TRUE(dropped);
  } else {
    EXPECT_EQ(w.layout, kernels::Fp8Layout::kRows);
    EXPECT_EQ(w.codes, codes->as<uint8_t>());
    EXPECT_FALSE(dropped);
  }
  const kernels::Fp8Weight rows{codes->as<uint8_t>(), scales->as<uint8_t>(), out, in};
  for (int64_t k = 0; k < in; k += 37) {
    for (int64_t col = 0; col < out; col += 5) {
      ASSERT_EQ(kernels::Fp8CodeOf(w, col, k), kernels::Fp8CodeOf(rows, col, k));
    }
  }
  constexpr int64_t m = 3;
  std::vector<bf16> x(m * in);
  for (int64_t i = 0; i < m * in; ++i) x[i] = F32ToBf16(static_cast<float>((i * 7) % 23) - 11.0f);
  std::vector<uint8_t> x_codes(m * in);
  std::vector<float> x_scales(m * in / 128);
  kernels::ActQuantFp8(x.data(), m, in, 128, x_codes.data(), x_scales.data());
  std::vector<bf16> want(m * out), got(m * out);
  kernels::Fp8Gemm(x_codes.data(), x_scales.data(), m, rows, want.data(), nullptr);
  model::Workspace ws;
  l->Forward(x.data(), m, got.data(), ws, nullptr);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(bf16)), 0);
}

}  // namespace
}  // namespace dsv4
