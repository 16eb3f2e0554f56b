#include "testing/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> g_counting{false};
std::atomic<size_t> g_min_bytes{0};
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Out of line: GCC would otherwise inline a delete into its caller and warn
// (-Wmismatched-new-delete) that free() meets a pointer from operator new.
[[gnu::noinline]] void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed) &&
      n >= g_min_bytes.load(std::memory_order_relaxed)) {
    ++g_allocations;
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
[[gnu::noinline]] void* operator new[](size_t n) { return operator new(n); }
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace dsv4::testing {

int64_t CountAllocations(FunctionRef<void()> fn, size_t min_bytes) {
  g_min_bytes = min_bytes;
  g_allocations = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_allocations.load();
}

}  // namespace dsv4::testing
