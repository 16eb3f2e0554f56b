#include "model/linear.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "base/logging.h"
#include "kernels/int8_gemm.h"
#include "kernels/quant.h"

namespace dsv4::model {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool IsAligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

}  // namespace

Result<Fp8Linear> Fp8Linear::Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                  int64_t out, int64_t in, WeightStore& store) {
  if (in % 128 != 0) {
    return InvalidArgument("{}: input width {} is not a multiple of 128 (FP8 activation blocks)",
                           name, in);
  }
  DSV4_ASSIGN_OR_RETURN(const TensorView* w,
                        ckpt.Require(name + ".weight", DType::kF8E4M3, {out, in}));
  DSV4_ASSIGN_OR_RETURN(const TensorView* s, ckpt.Require(name + ".scale", DType::kF8E8M0,
                                                          {CeilDiv(out, 128), CeilDiv(in, 128)}));
  Fp8Linear l;
  const kernels::Fp8Weight rows{w->as<uint8_t>(), s->as<uint8_t>(), out, in};
  l.w_ = Fp8ForGemm(rows, name, store);
  return l;
}

void Fp8Linear::Forward(const bf16* x, int64_t m, bf16* y, Workspace& ws, ThreadPool* pool) const {
  if (m == 0) return;
  const auto n = static_cast<size_t>(m * w_.in);
  uint8_t* codes = ws.Get<uint8_t>(WsSlot::kLinCodes, n);      // [m, in]
  float* scales = ws.Get<float>(WsSlot::kLinScales, n / 128);  // [m, in/128]
  kernels::ActQuantFp8(x, m, w_.in, 128, codes, scales);
  kernels::Fp8Gemm(codes, scales, m, w_, y, pool);
}

Result<Bf16Linear> Bf16Linear::Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                    int64_t out, int64_t in, bool pairs) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* w,
                        ckpt.Require(name + ".weight", DType::kBF16, {out, in}));
  Bf16Linear l;
  l.out_ = out;
  l.in_ = in;
  if (IsAligned(w->data, alignof(bf16))) {
    l.w_ = w->as<bf16>();
    // The copy replaces the mapped bytes (as the FP4/FP8 panel copies do).
    if (pairs && l.ToPairs()) ckpt.DropResidentPages(name + ".weight");
    return l;
  }
  l.owned_ = Buffer(w->nbytes());
  std::memcpy(l.owned_.data(), w->data, w->nbytes());
  l.w_ = l.owned_.as<bf16>();
  if (pairs) l.ToPairs();
  return l;
}

bool Bf16Linear::ToPairs() {
  if (layout_ != kernels::Bf16Layout::kRows || !kernels::GemmBf16ReadsPairs() ||
      !kernels::Bf16PairsFit(in_)) {
    return false;
  }
  Buffer pairs(static_cast<size_t>(kernels::Bf16PairsElements(out_, in_)) * sizeof(bf16));
  kernels::PackBf16Pairs(w_, out_, in_, pairs.as<bf16>());
  owned_ = std::move(pairs);
  w_ = owned_.as<bf16>();
  layout_ = kernels::Bf16Layout::kPairs;
  return true;
}

Result<Bf16Linear> Bf16Linear::LoadDequantizedFp8(const checkpoint::Checkpoint& ckpt,
                                                  const std::string& name, int64_t out, int64_t in,
                                                  bool pairs) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* w,
                        ckpt.Require(name + ".weight", DType::kF8E4M3, {out, in}));
  const int64_t scale_cols = CeilDiv(in, 128);
  DSV4_ASSIGN_OR_RETURN(const TensorView* s, ckpt.Require(name + ".scale", DType::kF8E8M0,
                                                          {CeilDiv(out, 128), scale_cols}));
  Bf16Linear l;
  l.owned_ = Buffer(static_cast<size_t>(out * in) * sizeof(bf16));
  bf16* dst = l.owned_.as<bf16>();
  const uint8_t* codes = w->as<uint8_t>();
  const uint8_t* scales = s->as<uint8_t>();
  float lut[256];  // e4m3 code -> value (exact)
  for (int c = 0; c < 256; ++c) lut[c] = E4M3ToF32(static_cast<uint8_t>(c));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i0 = 0; i0 < in; i0 += 128) {
      const float scale = E8M0ToF32(scales[(o / 128) * scale_cols + i0 / 128]);
      const int64_t i1 = std::min(in, i0 + 128);
      for (int64_t i = i0; i < i1; ++i) {
        const float v = lut[codes[o * in + i]] * scale;
        const bf16 b = F32ToBf16(v);
        if (Bf16ToF32(b) != v) {
          return DataLoss("{}: dequantized FP8 value at [{}, {}] is not exact in BF16 ({})", name,
                          o, i, v);
        }
        dst[o * in + i] = b;
      }
    }
  }
  l.w_ = dst;
  l.out_ = out;
  l.in_ = in;
  if (pairs) l.ToPairs();
  return l;
}

Bf16Linear Bf16Linear::FromData(const bf16* w, int64_t out, int64_t in) {
  Bf16Linear l;
  l.owned_ = Buffer(static_cast<size_t>(out * in) * sizeof(bf16));
  std::memcpy(l.owned_.data(), w, static_cast<size_t>(out * in) * sizeof(bf16));
  l.w_ = l.owned_.as<bf16>();
  l.out_ = out;
  l.in_ = in;
  l.ToPairs();
  return l;
}

void Bf16Linear::Forward(const bf16* x, int64_t ldx, int64_t m, bf16* y, int64_t ldy,
                         ThreadPool* pool) const {
  if (m == 0) return;
  kernels::GemmBf16(x, ldx, m, in_, w_, out_, y, ldy, pool, layout_);
}

Result<Int8Linear> Int8Linear::Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                    int64_t out, int64_t in, WeightStore& store) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* w, ckpt.Require(name + ".weight", DType::kI8, {out, in}));
  const TensorView* s = ckpt.Find(name + ".scale");
  std::string scale_name = name + ".scale";
  if (s == nullptr) {
    scale_name = name + ".weight_scale";
    s = ckpt.Find(scale_name);
  }
  if (s == nullptr) {
    return NotFound("{}: INT8 weight '{}.weight' has neither '{}.scale' nor '{}.weight_scale'",
                    ckpt.FileOf(name + ".weight"), name, name, name);
  }
  if (s->dtype != DType::kF32 || (s->shape != Shape{out} && s->shape != Shape{out, 1})) {
    return InvalidArgument("{}: tensor '{}': expected F32 [{}] (or [{}, 1]), found {} {}",
                           ckpt.FileOf(scale_name), scale_name, out, out, DTypeName(s->dtype),
                           ShapeToString(s->shape));
  }
  Int8Linear l;
  if (IsAligned(s->data, alignof(float))) {
    l.w_.scales = s->as<float>();
  } else {
    l.scales_ = Buffer(static_cast<size_t>(out) * sizeof(float));
    std::memcpy(l.scales_.data(), s->data, static_cast<size_t>(out) * sizeof(float));
    l.w_.scales = l.scales_.as<float>();
  }
  l.w_.codes = w->as<int8_t>();
  l.w_.out = out;
  l.w_.in = in;
  l.w_ = InInt8Panels(l.w_, store);
  if (l.w_.layout == kernels::Int8Layout::kPanels) store.DropAfterPacking(name + ".weight");
  return l;
}

void Int8Linear::Forward(const bf16* x, int64_t m, bf16* y, Workspace& ws, ThreadPool* pool) const {
  if (m == 0) return;
  int8_t* codes = ws.Get<int8_t>(WsSlot::kLinQ8, static_cast<size_t>(m * w_.in));  // [m, in]
  float* scales = ws.Get<float>(WsSlot::kLinS8, static_cast<size_t>(m));           // [m]
  kernels::ActQuantInt8PerToken(x, m, w_.in, codes, scales, pool);
  kernels::Int8Gemm(codes, scales, m, w_, y, pool);
}

Result<Linear> Linear::Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                            int64_t out, int64_t in, WeightStore& store) {
  const TensorView* w = ckpt.Find(name + ".weight");
  Linear l;
  if (w != nullptr && w->dtype == DType::kI8) {
    DSV4_ASSIGN_OR_RETURN(Int8Linear q, Int8Linear::Load(ckpt, name, out, in, store));
    l.impl_ = std::move(q);
  } else if (w != nullptr && w->dtype == DType::kBF16) {
    DSV4_ASSIGN_OR_RETURN(Bf16Linear b, Bf16Linear::Load(ckpt, name, out, in));
    l.impl_ = std::move(b);
  } else {
    DSV4_ASSIGN_OR_RETURN(Fp8Linear f,
                          Fp8Linear::Load(ckpt, name, out, in, store));  // names errors
    l.impl_ = std::move(f);
  }
  return l;
}

void Linear::Forward(const bf16* x, int64_t m, bf16* y, Workspace& ws, ThreadPool* pool) const {
  if (const auto* b = std::get_if<Bf16Linear>(&impl_)) {
    return b->Forward(x, b->in(), m, y, b->out(), pool);
  }
  std::visit(
      [&](const auto& l) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(l)>, Bf16Linear>) {
          l.Forward(x, m, y, ws, pool);
        }
      },
      impl_);
}

Result<Bf16OrFp8Linear> Bf16OrFp8Linear::Load(const checkpoint::Checkpoint& ckpt,
                                              const std::string& name, int64_t out, int64_t in,
                                              int64_t group_rows, WeightStore& store) {
  Bf16OrFp8Linear l;
  const TensorView* w = ckpt.Find(name + ".weight");
  // Pairs only where no pair straddles two groups (ForwardGrouped).
  const bool pairs = group_rows % 2 == 0;
  if (w != nullptr && w->dtype == DType::kBF16) {
    DSV4_ASSIGN_OR_RETURN(l.bf16_, Bf16Linear::Load(ckpt, name, out, in, pairs));
    return l;
  }
  if (in % 128 == 0 && group_rows % 128 == 0) {
    DSV4_ASSIGN_OR_RETURN(const TensorView* codes,
                          ckpt.Require(name + ".weight", DType::kF8E4M3, {out, in}));
    DSV4_ASSIGN_OR_RETURN(const TensorView* s, ckpt.Require(name + ".scale", DType::kF8E8M0,
                                                            {CeilDiv(out, 128), in / 128}));
    const kernels::Fp8Weight fp8{codes->as<uint8_t>(), s->as<uint8_t>(), out, in};
    if (kernels::Fp8IsExactBf16(fp8)) {
      l.fp8_ = Fp8ForGemm(fp8, name, store);
      return l;
    }
  }
  DSV4_ASSIGN_OR_RETURN(l.bf16_, Bf16Linear::LoadDequantizedFp8(ckpt, name, out, in, pairs));
  return l;
}

void Bf16OrFp8Linear::ForwardGrouped(const bf16* x, int64_t ldx, int64_t m, int64_t groups, bf16* y,
                                     int64_t ldy, ThreadPool* pool) const {
  if (m == 0) return;
  if (is_fp8()) return kernels::GemmBf16Fp8Grouped(x, ldx, m, groups, fp8_, y, ldy, pool);
  const int64_t in = bf16_.in();
  const int64_t rows = bf16_.out() / groups;
  // In pairs, group g's first column starts at g·rows·in too when rows is
  // even (no pair straddles two groups).
  DSV4_CHECK(bf16_.layout() == kernels::Bf16Layout::kRows || rows % 2 == 0);
  for (int64_t g = 0; g < groups; ++g) {
    kernels::GemmBf16(x + g * in, ldx, m, in, bf16_.data() + g * rows * in, rows, y + g * rows, ldy,
                      pool, bf16_.layout());
  }
}

Result<Buffer> LoadF32Copy(const checkpoint::Checkpoint& ckpt, const std::string& name,
                           const Shape& shape) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* t, ckpt.Require(name, DType::kF32, shape));
  Buffer b(t->nbytes());
  std::memcpy(b.data(), t->data, t->nbytes());
  return b;
}

Result<Buffer> LoadBf16Copy(const checkpoint::Checkpoint& ckpt, const std::string& name,
                            const Shape& shape) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* t, ckpt.Require(name, DType::kBF16, shape));
  Buffer b(t->nbytes());
  std::memcpy(b.data(), t->data, t->nbytes());
  return b;
}

}  // namespace dsv4::model
