// WeightStore's deferred FP4 packing (model/weights.h): the copies it makes
// after binding equal PackFp4Panels, over several batches and threads, and
// the source tensors dropped along the way stay readable.  (That a drop
// leaves the resident set: Checkpoint.DropResidentPagesKeepsBytesReadable.)
// And Fp8Linear's load-time FP8 panel copy and Bf16Linear's pair copy
// (model/linear.h).
#include "model/weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"
#include "kernels/gemm.h"
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

// Where the BF16 GEMMs read the pair layout, Bf16Linear::Load copies the
// weight into it and drops the mapped source; the forward is the rows' bit
// for bit.
TEST(Bf16Linear, LoadCopiesIntoPairsAndDropsTheSource) {
  auto ckpt = checkpoint::Checkpoint::Open(testing::TestDataPath("golden/tiny-a"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const checkpoint::Checkpoint& c = **ckpt;
  const TensorView* t = c.Find("head.weight");
  ASSERT_NE(t, nullptr);
  const int64_t out = t->dim(0), in = t->dim(1);
  auto l = model::Bf16Linear::Load(c, "head", out, in);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const auto at = reinterpret_cast<uintptr_t>(t->data);
  bool dropped = false;
  for (const auto& [begin, end] : c.DroppedRanges()) dropped |= begin <= at && at < end;
  const bool pairs = kernels::GemmBf16ReadsPairs() && kernels::Bf16PairsFit(in);
  EXPECT_EQ(l->layout(), pairs ? kernels::Bf16Layout::kPairs : kernels::Bf16Layout::kRows);
  EXPECT_EQ(dropped, pairs);
  EXPECT_EQ(l->data() == t->as<bf16>(), !pairs);
  constexpr int64_t m = 3;
  std::vector<bf16> x(m * in), want(m * out), got(m * out);
  for (int64_t i = 0; i < m * in; ++i) x[i] = F32ToBf16(static_cast<float>((i * 7) % 23) - 11.0f);
  kernels::GemmBf16(x.data(), in, m, in, t->as<bf16>(), out, want.data(), out, nullptr);
  l->Forward(x.data(), in, m, got.data(), out, nullptr);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(bf16)), 0);
}

// A grouped BF16 projection takes pairs only when its groups hold an even
// number of rows (no pair may straddle two groups); either way
// ForwardGrouped equals one GemmBf16 per group on the rows.
TEST(Bf16OrFp8Linear, GroupedBf16KeepsRowsForOddGroupsAndMatchesPerGroupCalls) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(DSV4_BINARY_DIR) / "tmp" / ("grouped-bf16-" + std::to_string(::getpid()));
  constexpr int64_t in = 128, groups = 2, m = 2;
  for (int64_t rows : {3, 4}) {
    SCOPED_TRACE(rows);
    const int64_t out = groups * rows;
    std::vector<bf16> w(out * in), x(m * groups * in);
    for (int64_t i = 0; i < out * in; ++i) w[i] = F32ToBf16(0.01f * static_cast<float>(i % 97));
    for (int64_t i = 0; i < m * groups * in; ++i) {
      x[i] = F32ToBf16(static_cast<float>((i * 5) % 17) - 8.0f);
    }
    fs::remove_all(dir);
    fs::create_directories(dir);
    ASSERT_TRUE(checkpoint::WriteSafetensorsFile((dir / "model.safetensors").string(),
                                                 {{"p.weight", DType::kBF16, {out, in}, w.data()}})
                    .ok());
    auto ckpt = checkpoint::Checkpoint::Open(dir.string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    model::WeightStore store;
    auto l = model::Bf16OrFp8Linear::Load(**ckpt, "p", out, in, rows, store);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    const bool pairs = rows % 2 == 0 && kernels::GemmBf16ReadsPairs();
    EXPECT_EQ(l->bf16_linear().layout(),
              pairs ? kernels::Bf16Layout::kPairs : kernels::Bf16Layout::kRows);
    std::vector<bf16> want(m * out), got(m * out);
    for (int64_t g = 0; g < groups; ++g) {
      kernels::GemmBf16(x.data() + g * in, groups * in, m, in, w.data() + g * rows * in, rows,
                        want.data() + g * rows, out, nullptr);
    }
    l->ForwardGrouped(x.data(), groups * in, m, groups, got.data(), out, nullptr);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(bf16)), 0);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
