// Loaded linear layers, one class per weight kind of docs/model.md "Linear layer kinds".
//
// Each class checks the checkpoint tensor's dtype and shape at load (errors
// name the tensor), keeps a zero-copy view into the memory-mapped checkpoint
// where the kernels can consume it, and owns an aligned copy where they cannot
// (a misaligned BF16 tensor, or a weight the reference converts at load such
// as wo_a's FP8 -> BF16 dequantization); the FP8 panel copies of the BF16 dot
// kernel live in the model's WeightStore (Fp8ForGemm).  All are move-only
// and immutable after Load, so one instance serves concurrent forwards.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "kernels/gemm.h"
#include "kernels/int8_gemm.h"
#include "model/weights.h"
#include "model/workspace.h"
#include "tensor/numeric.h"
#include "tensor/tensor.h"

namespace dsv4::model {

// FP8 e4m3 weight with 128x128 E8M0 block scales ("<name>.weight" F8_E4M3
// [out, in], "<name>.scale" F8_E8M0 [ceil(out/128), ceil(in/128)]).
// Forward = ActQuantFp8 (block 128) + Fp8Gemm: BF16 in, BF16 out, exactly the
// reference's `linear` for FP8 weights.  The codes are a view into the
// mapping or the panel copy Fp8ForGemm defers into the store (filled by
// WeightStore::PackDeferred, which must run before Forward); the scales a
// view.
class Fp8Linear {
 public:
  Fp8Linear() = default;
  Fp8Linear(Fp8Linear&&) noexcept = default;
  Fp8Linear& operator=(Fp8Linear&&) noexcept = default;
  Fp8Linear(const Fp8Linear&) = delete;
  Fp8Linear& operator=(const Fp8Linear&) = delete;

  // `name` without the ".weight"/".scale" suffix, e.g. "layers.3.attn.wq_a".
  // REQUIRES (checked, error): in % 128 == 0 (activation quantization blocks).
  static Result<Fp8Linear> Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                int64_t out, int64_t in, WeightStore& store);

  // y [m, out] = bf16(W . act_quant(x)), x [m, in] BF16.  Row r of y depends
  // only on row r of x.  Uses Workspace slots kLinCodes and kLinScales
  // (valid only during the call).
  void Forward(const bf16* x, int64_t m, bf16* y, Workspace& ws, ThreadPool* pool) const;

  int64_t out() const { return w_.out; }
  int64_t in() const { return w_.in; }
  const kernels::Fp8Weight& weight() const { return w_; }

 private:
  kernels::Fp8Weight w_;  // views into the mapping or the store (byte data: no alignment needs)
};

// BF16 weight "<name>.weight" [out, in] used as a BF16 GEMM operand
// (FP32 accumulation) or, where the reference holds an FP32 parameter, as an
// exactly upcast FP32 operand.  Where the GEMMs read the BF16 pair layout
// (kernels::GemmBf16ReadsPairs, in % 128 == 0) the weight is copied into it
// at load, and the mapped source's pages leave the resident set; the bits
// are the same either way.
class Bf16Linear {
 public:
  Bf16Linear() = default;
  Bf16Linear(Bf16Linear&&) noexcept = default;
  Bf16Linear& operator=(Bf16Linear&&) noexcept = default;
  Bf16Linear(const Bf16Linear&) = delete;
  Bf16Linear& operator=(const Bf16Linear&) = delete;

  // Zero-copy unless the mapped data is not 2-byte aligned (then copied) or
  // the pair layout applies.  pairs = false keeps the rows (a grouped
  // projection whose groups hold an odd number of rows: a pair would
  // straddle two groups).
  static Result<Bf16Linear> Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                 int64_t out, int64_t in, bool pairs = true);
  // The FP8 weight "<name>.weight"/"<name>.scale" dequantized to BF16
  // (code value x block scale, exact in BF16 for the checkpoint's scales; an
  // inexact product is an error), as the reference's converter does for wo_a.
  static Result<Bf16Linear> LoadDequantizedFp8(const checkpoint::Checkpoint& ckpt,
                                               const std::string& name, int64_t out, int64_t in,
                                               bool pairs = true);
  // Copies w [out, in] (tests and synthetic weights).
  static Bf16Linear FromData(const bf16* w, int64_t out, int64_t in);

  // y [m, out] (row stride ldy) = bf16(x [m, in] (row stride ldx) . W^T).
  void Forward(const bf16* x, int64_t ldx, int64_t m, bf16* y, int64_t ldy, ThreadPool* pool) const;

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  // The weight in layout(): [out, in] rows or the BF16 pair layout.
  const bf16* data() const { return w_; }
  kernels::Bf16Layout layout() const { return layout_; }

 private:
  // Copies w_ into owned_ in the pair layout where the GEMMs read it;
  // returns whether it did.
  bool ToPairs();

  const bf16* w_ = nullptr;  // in layout_; points into the mapping or into owned_
  int64_t out_ = 0;
  int64_t in_ = 0;
  kernels::Bf16Layout layout_ = kernels::Bf16Layout::kRows;
  Buffer owned_;
};

// W8A8 weight (docs/convert.md): "<name>.weight" I8 [out, in] with one FP32
// scale per output channel, read from "<name>.scale" [out] (what dsv4 convert
// and the reference converter write) or else "<name>.weight_scale" [out] or
// [out, 1] (the compressed-tensors convention).  Forward = per-token INT8
// activation quantization + Int8Gemm (kernels/int8_gemm.h).  The codes are
// copied into the store in the panel layout where the CPU's kernel reads it
// (InInt8Panels, model/weights.h), else a view into the mapping; the scales
// are a view (copied if misaligned).
class Int8Linear {
 public:
  Int8Linear() = default;
  Int8Linear(Int8Linear&&) noexcept = default;
  Int8Linear& operator=(Int8Linear&&) noexcept = default;
  Int8Linear(const Int8Linear&) = delete;
  Int8Linear& operator=(const Int8Linear&) = delete;

  static Result<Int8Linear> Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                 int64_t out, int64_t in, WeightStore& store);

  // y [m, out] = Int8Gemm(act_quant_int8(x)), x [m, in] BF16.  Row r of y
  // depends only on row r of x.  Uses Workspace slots kLinQ8 and kLinS8.
  void Forward(const bf16* x, int64_t m, bf16* y, Workspace& ws, ThreadPool* pool) const;

  int64_t out() const { return w_.out; }
  int64_t in() const { return w_.in; }
  const kernels::Int8Weight& weight() const { return w_; }

 private:
  kernels::Int8Weight w_;  // codes in the store or the mapping, scales in the mapping or scales_
  Buffer scales_;          // [out] FP32, only when the mapped scales are misaligned
};

// A dense linear of whichever format the checkpoint holds for `name`: FP8
// block-scaled (native), INT8 per channel (W8A8) or BF16 (the W8A8
// converter's fallback for wq_a/wkv).  The format is read from the stored
// weight's dtype, so one model definition serves both checkpoint kinds.
class Linear {
 public:
  Linear() = default;
  Linear(Linear&&) noexcept = default;
  Linear& operator=(Linear&&) noexcept = default;

  // `store` receives the FP8 panel copy (Fp8Linear::Load).
  static Result<Linear> Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                             int64_t out, int64_t in, WeightStore& store);
  void Forward(const bf16* x, int64_t m, bf16* y, Workspace& ws, ThreadPool* pool) const;

  bool is_fp8() const { return std::holds_alternative<Fp8Linear>(impl_); }
  bool is_int8() const { return std::holds_alternative<Int8Linear>(impl_); }
  bool is_bf16() const { return std::holds_alternative<Bf16Linear>(impl_); }

 private:
  std::variant<Fp8Linear, Int8Linear, Bf16Linear> impl_;
};

// A linear whose reference weight is BF16 (wo_a): BF16 "<name>.weight" as
// stored (W8A8 checkpoints, the prepacked sidecar), or the FP8 weight of a
// native checkpoint, which the reference's converter dequantizes to BF16.
// The FP8 weight is used in place (kernels::GemmBf16Fp8: the same exact
// products as the GEMM on the dequantized copy, at half the bytes per decode
// token, and no conversion at load) when every code·scale is exact in BF16
// (kernels::Fp8IsExactBf16) and the row groups of ForwardGrouped are whole
// 128-row scale blocks; otherwise it is dequantized at load
// (Bf16Linear::LoadDequantizedFp8).
class Bf16OrFp8Linear {
 public:
  // `group_rows`: the rows of one group of ForwardGrouped (out / groups).
  // `store` receives the FP8 panel copy (Fp8ForGemm).
  static Result<Bf16OrFp8Linear> Load(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                      int64_t out, int64_t in, int64_t group_rows,
                                      WeightStore& store);

  // For every group g < groups (rows = out / groups): y[:, g·rows : (g+1)·rows] =
  // bf16(x[:, g·in : (g+1)·in] . W[g·rows : (g+1)·rows]^T); x [m, groups·in] (row
  // stride ldx), y [m, out] (row stride ldy).  One pool dispatch for all groups
  // when the FP8 weight is used in place (kernels::GemmBf16Fp8Grouped).
  // REQUIRES: out / groups == Load's group_rows.
  void ForwardGrouped(const bf16* x, int64_t ldx, int64_t m, int64_t groups, bf16* y, int64_t ldy,
                      ThreadPool* pool) const;

  bool is_fp8() const { return fp8_.codes != nullptr; }
  const Bf16Linear& bf16_linear() const { return bf16_; }  // meaningful unless is_fp8()

 private:
  Bf16Linear bf16_;           // used unless is_fp8()
  kernels::Fp8Weight fp8_{};  // views into the mapping or the store when used in place
};

// An F32 tensor copied into aligned storage (mapped data may be misaligned).
// Errors name the tensor when it is missing or its shape differs.
Result<Buffer> LoadF32Copy(const checkpoint::Checkpoint& ckpt, const std::string& name,
                           const Shape& shape);
// A BF16 tensor (norm weights) as an aligned copy.
Result<Buffer> LoadBf16Copy(const checkpoint::Checkpoint& ckpt, const std::string& name,
                            const Shape& shape);

}  // namespace dsv4::model
