// Reusable scratch memory for one forward call.  Buffers grow to the largest
// call seen and are then reused, so steady-state decoding allocates nothing
// per token.  Not thread-safe: one Workspace per concurrent forward.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>

#include "tensor/tensor.h"

namespace dsv4 {

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // A zero-filled-at-first-allocation buffer of at least count elements of T,
  // identified by `key` (a stable name such as "attn.q").  Two keys never
  // alias; the same key returns the same storage until it must grow.
  template <typename T>
  T* Get(const std::string& key, size_t count) {
    Buffer& b = buffers_[key];
    b.Reserve(count * sizeof(T));
    return b.as<T>();
  }

  size_t TotalBytes() const {
    size_t n = 0;
    for (const auto& [k, b] : buffers_) n += b.size();
    return n;
  }

 private:
  std::unordered_map<std::string, Buffer> buffers_;
};

}  // namespace dsv4
