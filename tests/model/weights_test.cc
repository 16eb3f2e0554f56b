// WeightStore's deferred FP4 packing (model/weights.h): the copies it makes
// after binding equal PackFp4Panels, over several batches and threads, and
// the source tensors dropped along the way stay readable.  (That a drop
// leaves the resident set: Checkpoint.DropResidentPagesKeepsBytesReadable.)
#include "model/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "testing/golden.h"

namespace dsv4 {
namespace {

TEST(WeightStore, DeferredPackingEqualsPackFp4PanelsAndDropsAfterItsCopies) {
  auto ckpt = checkpoint::Checkpoint::Open(testing::TestDataPath("golden/tiny-a"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const checkpoint::Checkpoint& c = **ckpt;
  const std::string name = "layers.0.ffn.experts.0.w1";
  const TensorView* codes = c.Find(name + ".weight");
  const TensorView* scales = c.Find(name + ".scale");
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

}  // namespace
}  // namespace dsv4
