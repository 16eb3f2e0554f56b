// Reusable scratch memory for one forward call.  Buffers grow to the largest
// call seen and are then reused, so steady-state decoding allocates nothing
// per token.  Not thread-safe: one Workspace per concurrent forward.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
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
  // Growth is geometric (x1.5) so a buffer sized by context length (indexer
  // scores, row lists) reallocates O(log n) times, not every few tokens.
  template <typename T>
  T* Get(std::string_view key, size_t count) {
    auto it = buffers_.find(key);
    if (it == buffers_.end()) it = buffers_.emplace(std::string(key), Buffer()).first;
    Buffer& b = it->second;
    const size_t bytes = count * sizeof(T);
    if (bytes > b.size()) b.Reserve(std::max(bytes, b.size() + b.size() / 2));
    return b.as<T>();
  }

  size_t TotalBytes() const {
    size_t n = 0;
    for (const auto& [k, b] : buffers_) n += b.size();
    return n;
  }

 private:
  // Transparent hashing: lookups by string_view allocate nothing.
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view k) const { return std::hash<std::string_view>{}(k); }
  };
  std::unordered_map<std::string, Buffer, KeyHash, std::equal_to<>> buffers_;
};

}  // namespace dsv4
