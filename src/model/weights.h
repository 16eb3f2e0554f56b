// Binding of checkpoint tensors to the views the kernels consume
// (architecture decision 8: zero-copy where possible).
//
// FP8/FP4 codes and E8M0 scales, BF16 and FP32 tensors are views into the
// memory-mapped shards (or the prepacked sidecar, docs/prepack.md) whenever
// their mapped address is naturally aligned; a misaligned one is copied into
// a 64-byte aligned buffer owned by a WeightStore.  tid2eid is I64 in the
// checkpoint (narrowed to int32 into the store after a range check) and I32
// in the sidecar (a view, range-checked the same way).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "checkpoint/checkpoint.h"
#include "kernels/gemm.h"
#include "kernels/int8_gemm.h"
#include "tensor/numeric.h"
#include "tensor/tensor.h"

namespace dsv4::model {

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

  // The panel copies (FP4, FP8 where the BF16 dot kernel runs, W8A8 where
  // the VNNI kernel runs) are made
  // after binding, over a pool (they are most of a checkpoint's bytes):
  // DeferPack records one copy of `rows` (kRows) into `codes` (/ `scales`:
  // FP4 only, FP8 and INT8 keep theirs) and returns the view it will fill;
  // DropAfterPacking names a tensor whose mapped pages leave the resident
  // set once every copy recorded so far is made; PackDeferred makes the
  // copies in order on `threads` threads (0 = every CPU), a batch at a time,
  // dropping each tensor's pages after the batch that finishes its copies
  // (so the source and its copy are resident together for one batch, not
  // for the whole checkpoint).  Nothing may read a deferred view before
  // PackDeferred.
  kernels::Fp4Weight DeferPack(const kernels::Fp4Weight& rows, uint8_t* codes, uint8_t* scales);
  kernels::Fp8Weight DeferPack(const kernels::Fp8Weight& rows, uint8_t* codes);
  kernels::Int8Weight DeferPack(const kernels::Int8Weight& rows, int8_t* codes);
  void DropAfterPacking(std::string tensor);
  void PackDeferred(const checkpoint::Checkpoint& ckpt, int threads);

 private:
  struct Fp4Job {
    kernels::Fp4Weight rows;
    uint8_t* codes;
    uint8_t* scales;
  };
  struct Fp8Job {
    kernels::Fp8Weight rows;
    uint8_t* codes;
  };
  struct Int8Job {
    kernels::Int8Weight rows;
    int8_t* codes;
  };
  using PackJob = std::variant<Fp4Job, Fp8Job, Int8Job>;
  std::vector<Buffer> buffers_;
  struct Drop {
    std::string tensor;
    size_t after_jobs;  // droppable once pack_jobs_[0, after_jobs) are made
  };
  std::vector<PackJob> pack_jobs_;
  std::vector<Drop> drops_;
};

// BF16 tensor `name` of exactly `shape`; zero-copy unless misaligned.
Result<const bf16*> BindBf16(const checkpoint::Checkpoint& ckpt, const std::string& name,
                             const Shape& shape, WeightStore& store);

// FP32 tensor `name` of exactly `shape`; zero-copy unless misaligned.
Result<const float*> BindF32(const checkpoint::Checkpoint& ckpt, const std::string& name,
                             const Shape& shape, WeightStore& store);

// Id table `name` [rows, cols] as int32: I64 (checkpoint) narrowed into the
// store, or I32 (sidecar) bound in place.  Every value must lie in
// [0, max_value) and each row must hold distinct values (the reference applies
// a repeated expert once, so a repeated id would silently change the sum).
Result<const int32_t*> BindIdTable(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                   int64_t rows, int64_t cols, int64_t max_value,
                                   WeightStore& store);

// The FP8 weight w (`name`.weight, kRows) in the layout this CPU's FP8 GEMM
// kernel reads: where it is the BF16 dot kernel (kernels::Fp8GemmUsesBf16Dots)
// a copy in the panel layout, deferred into the store (DeferPack), after
// which the mapped source's pages leave the resident set
// (DropAfterPacking); else w itself.  The same bits either way (a weight in
// the other layout is converted per call).  (FP8 block-scaled linears are
// bound by Fp8Linear::Load, model/linear.h.)
kernels::Fp8Weight Fp8ForGemm(const kernels::Fp8Weight& w, const std::string& name,
                              WeightStore& store);

// The W8A8 weight w (kRows) in the layout this CPU's INT8 GEMM reads
// fastest: where it is the VNNI panel kernel (kernels::Int8GemmUsesPanels) a
// copy in the panel layout, deferred into the store (DeferPack; the caller
// drops the source's pages with DropAfterPacking), else w itself.  The same
// bits either way.
kernels::Int8Weight InInt8Panels(const kernels::Int8Weight& w, WeightStore& store);

// MXFP4 linear `<prefix>.weight` I8 [out, in/2] with `<prefix>.scale`
// F8_E8M0 [out, in/32], packed into the store in the GEMM kernels' panel
// layout (InPanels); the mapped source pages then leave the resident set
// (WeightStore::DropAfterPacking).
Result<kernels::Fp4Weight> BindFp4Weight(const checkpoint::Checkpoint& ckpt,
                                         const std::string& prefix, int64_t out, int64_t in,
                                         WeightStore& store);

// w copied into the store in the panel layout (kernels/gemm.h) when its
// width allows it (in % 128 == 0; the copy deferred, WeightStore::DeferPack),
// else w itself.  The GEMM kernels read only that layout: a weight left in
// rows would be repacked at every call.
kernels::Fp4Weight InPanels(const kernels::Fp4Weight& w, WeightStore& store);

}  // namespace dsv4::model
