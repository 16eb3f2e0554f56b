// Per-thread reusable scratch for kernels (docs/kernels.md "Scratch memory"):
// a kernel that needs a temporary array takes it from here instead of the heap,
// so a steady-state decode step allocates nothing inside the kernels.
#pragma once

#include <cstddef>
#include <memory>

namespace dsv4::kernels {

// ScratchArray<Tag, T>::Get(count) returns uninitialized storage for count T
// on the calling thread, valid until that thread's next Get with the same Tag.
// It grows geometrically to the largest request and is never returned to the
// heap (it lives as long as the thread).  Each use site names its own Tag, so
// two live arrays never share storage; a kernel must not call itself (or
// another kernel using its Tag) on the same thread while it holds the array,
// which is the case for every kernel: they call only pure helpers and the
// thread pool, whose tasks use their own threads' arrays.
template <typename Tag, typename T>
class ScratchArray {
 public:
  static T* Get(size_t count) {
    thread_local Storage s;
    if (count == 0) count = 1;  // callers may index an empty array's begin
    if (count > s.capacity) {
      s.capacity = count > s.capacity + s.capacity / 2 ? count : s.capacity + s.capacity / 2;
      s.data = std::make_unique_for_overwrite<T[]>(s.capacity);
    }
    return s.data.get();
  }

 private:
  struct Storage {
    std::unique_ptr<T[]> data;
    size_t capacity = 0;
  };
};

}  // namespace dsv4::kernels
