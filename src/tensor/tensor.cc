#include "tensor/tensor.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

namespace dsv4 {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Buffer::Buffer(size_t bytes) { Reserve(bytes); }

void Buffer::Reserve(size_t bytes) {
  if (bytes <= size_ && ptr_) return;
  constexpr size_t kHugePage = size_t{2} << 20;
  const bool huge = bytes >= kHugePage;
  const size_t align = huge ? kHugePage : 64;
  const size_t rounded = bytes == 0 ? 64 : (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (huge) ::madvise(p, rounded, MADV_HUGEPAGE);  // advisory; fails harmlessly without THP
  std::memset(p, 0, rounded);
  ptr_.reset(p);
  size_ = bytes;
}

Buffer Buffer::Clone() const {
  Buffer b(size_);
  if (size_) std::memcpy(b.data(), data(), size_);
  return b;
}

}  // namespace dsv4
