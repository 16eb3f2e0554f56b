#include "model/weights.h"

#include <cstring>

namespace dsv4 {

size_t WeightStore::TotalBytes() const {
  size_t n = 0;
  for (const Buffer& b : buffers_) n += b.size();
  return n;
}

Result<const bf16*> BindBf16(const Checkpoint& ckpt, const std::string& name, const Shape& shape,
                             WeightStore& store) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* t, ckpt.Require(name, DType::kBF16, shape));
  if (reinterpret_cast<uintptr_t>(t->data) % alignof(bf16) == 0) return t->as<bf16>();
  bf16* copy = store.Allocate<bf16>(t->numel());
  std::memcpy(copy, t->data, t->nbytes());
  return static_cast<const bf16*>(copy);
}

Result<const float*> CopyF32(const Checkpoint& ckpt, const std::string& name, const Shape& shape,
                             WeightStore& store) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* t, ckpt.Require(name, DType::kF32, shape));
  float* copy = store.Allocate<float>(t->numel());
  std::memcpy(copy, t->data, t->nbytes());
  return static_cast<const float*>(copy);
}

Result<const int32_t*> CopyIdTable(const Checkpoint& ckpt, const std::string& name, int64_t rows,
                                   int64_t cols, int64_t max_value, WeightStore& store) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* t, ckpt.Require(name, DType::kI64, {rows, cols}));
  int32_t* table = store.Allocate<int32_t>(rows * cols);
  const auto* bytes = static_cast<const uint8_t*>(t->data);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      int64_t v;  // the mapped data may be misaligned for int64
      std::memcpy(&v, bytes + (r * cols + c) * 8, 8);
      if (v < 0 || v >= max_value) {
        return DataLoss("{}: tensor {} row {} holds id {} outside [0, {})", ckpt.FileOf(name), name,
                        r, v, max_value);
      }
      for (int64_t p = 0; p < c; ++p) {
        if (table[r * cols + p] == v) {
          return DataLoss("{}: tensor {} row {} repeats id {}", ckpt.FileOf(name), name, r, v);
        }
      }
      table[r * cols + c] = static_cast<int32_t>(v);
    }
  }
  return static_cast<const int32_t*>(table);
}

Result<kernels::Fp4Weight> BindFp4Weight(const Checkpoint& ckpt, const std::string& prefix,
                                         int64_t out, int64_t in) {
  if (in % 32 != 0) {
    return InvalidArgument("{}: FP4 weight input width {} is not a multiple of 32", prefix, in);
  }
  DSV4_ASSIGN_OR_RETURN(const TensorView* w,
                        ckpt.Require(prefix + ".weight", DType::kI8, {out, in / 2}));
  DSV4_ASSIGN_OR_RETURN(const TensorView* s,
                        ckpt.Require(prefix + ".scale", DType::kF8E8M0, {out, in / 32}));
  kernels::Fp4Weight r;
  r.packed = w->as<uint8_t>();
  r.scales = s->as<uint8_t>();
  r.out = out;
  r.in = in;
  return r;
}

}  // namespace dsv4
