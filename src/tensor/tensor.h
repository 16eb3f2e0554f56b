// Tensor views (non-owning) and owned, 64-byte aligned buffers.
//
// A TensorView is a dtype, a row-major shape and a pointer: what a checkpoint
// tensor or an activation is to the kernels.  It never owns memory; mapped
// checkpoint files and Buffer objects do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace dsv4 {

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);

struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;

  int64_t numel() const { return NumElements(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i)]; }
  int rank() const { return static_cast<int>(shape.size()); }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

// Owned, zero-initialised, 64-byte aligned storage.  Move-only.  From 2 MiB
// up it is 2 MiB aligned, rounded up to whole 2 MiB, and advised
// MADV_HUGEPAGE before it is first touched: large buffers (repacked weights,
// working memory) are streamed through, and 4 KiB pages cost a TLB miss and
// a hardware-prefetch stop every 4 KiB (docs/deploy.md "Huge pages").
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Grows (never shrinks) to at least `bytes`; contents are not preserved.
  void Reserve(size_t bytes);
  Buffer Clone() const;

  void* data() { return ptr_.get(); }
  const void* data() const { return ptr_.get(); }
  template <typename T>
  T* as() {
    return static_cast<T*>(data());
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data());
  }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> ptr_;
  size_t size_ = 0;
};

}  // namespace dsv4
