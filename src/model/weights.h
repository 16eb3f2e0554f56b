// Binding of checkpoint tensors to the views the kernels consume
// (architecture decision 8: zero-copy where possible).
//
// FP8/FP4 codes and E8M0 scales, BF16 weights and norm vectors are views into
// the memory-mapped shards (one byte or two-byte elements need no repacking).
// Small FP32 tensors (mHC, router bias) and tid2eid (I64 in the file, narrowed
// to int32 after a range check) are copied into 64-byte aligned buffers owned
// by a WeightStore, as is any BF16 tensor whose mapped address is misaligned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "checkpoint/checkpoint.h"
#include "kernels/gemm.h"
#include "tensor/numeric.h"
#include "tensor/tensor.h"

namespace dsv4 {

// Owns the copies made at load time.  Pointers it returns stay valid for the
// store's lifetime (buffers never move once allocated).
class WeightStore {
 public:
  WeightStore() = default;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  template <typename T>
  T* Allocate(int64_t count) {
    buffers_.emplace_back(static_cast<size_t>(count) * sizeof(T));
    return buffers_.back().as<T>();
  }
  size_t TotalBytes() const;

 private:
  std::vector<Buffer> buffers_;
};

// BF16 tensor `name` of exactly `shape`; zero-copy unless misaligned.
Result<const bf16*> BindBf16(const Checkpoint& ckpt, const std::string& name, const Shape& shape,
                             WeightStore& store);

// FP32 tensor `name` of exactly `shape`, copied (aligned).
Result<const float*> CopyF32(const Checkpoint& ckpt, const std::string& name, const Shape& shape,
                             WeightStore& store);

// I64 table `name` [rows, cols] narrowed to int32.  Every value must lie in
// [0, max_value) and each row must hold distinct values (the reference applies
// a repeated expert once, so a repeated id would silently change the sum).
Result<const int32_t*> CopyIdTable(const Checkpoint& ckpt, const std::string& name, int64_t rows,
                                   int64_t cols, int64_t max_value, WeightStore& store);

// (FP8 block-scaled linears are bound by Fp8Linear::Load, model/linear.h.)
// MXFP4 linear `<prefix>.weight` I8 [out, in/2] with `<prefix>.scale`
// F8_E8M0 [out, in/32].  Zero-copy.
Result<kernels::Fp4Weight> BindFp4Weight(const Checkpoint& ckpt, const std::string& prefix,
                                         int64_t out, int64_t in);

}  // namespace dsv4
