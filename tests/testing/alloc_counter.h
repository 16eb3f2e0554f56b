// Counts the heap allocations a piece of code makes.  The test binary that
// lists testing/alloc_counter.cc among its own sources gets a global
// operator new that counts while CountAllocations runs (any thread); it is not
// part of dsv4_testing, so no other test binary replaces operator new.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/function_ref.h"

namespace dsv4::testing {

// Calls to operator new / new[] of at least min_bytes, on any thread, while
// fn runs.
int64_t CountAllocations(FunctionRef<void()> fn, size_t min_bytes = 0);

}  // namespace dsv4::testing
