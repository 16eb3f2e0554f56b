#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "base/logging.h"
#include "base/thread_pool.h"

namespace dsv4::model {

size_t WeightStore::TotalBytes() const {
  size_t n = 0;
  for (const Buffer& b : buffers_) n += b.size();
  return n;
}

kernels::Fp4Weight WeightStore::DeferPack(const kernels::Fp4Weight& rows, uint8_t* codes,
                                          uint8_t* scales) {
  pack_jobs_.push_back(Fp4Job{rows, codes, scales});
  kernels::Fp4Weight view = rows;
  view.packed = codes;
  view.scales = scales;
  view.layout = kernels::Fp4Layout::kPanels;
  return view;
}

kernels::Fp8Weight WeightStore::DeferPack(const kernels::Fp8Weight& rows, uint8_t* codes) {
  pack_jobs_.push_back(Fp8Job{rows, codes});
  kernels::Fp8Weight view = rows;
  view.codes = codes;
  view.layout = kernels::Fp8Layout::kPanels;
  return view;
}

kernels::Int8Weight WeightStore::DeferPack(const kernels::Int8Weight& rows, int8_t* codes) {
  pack_jobs_.push_back(Int8Job{rows, codes});
  kernels::Int8Weight view = rows;
  view.codes = codes;
  view.layout = kernels::Int8Layout::kPanels;
  return view;
}

void WeightStore::DropAfterPacking(std::string tensor) {
  drops_.push_back({std::move(tensor), pack_jobs_.size()});
}

void WeightStore::PackDeferred(const checkpoint::Checkpoint& ckpt, int threads) {
  // 64 copies per batch: ~0.4-0.8 GB of Flash's experts (6-13 MB each; an
  // FP8 dense weight is 1-64 MB), one
  // weight per task, so a batch spreads evenly over the threads and each
  // first-touches its own pages.
  constexpr size_t kBatch = 64;
  const size_t n = pack_jobs_.size();
  std::unique_ptr<ThreadPool> pool;  // null: the calling thread packs alone
  if (n > 0) {
    // --threads comes from the user: a count the OS refuses (or out of
    // range) packs on fewer threads rather than aborting the load.
    Result<std::unique_ptr<ThreadPool>> made =
        ThreadPool::Create(threads > 0 ? threads : ThreadPool::DefaultThreads());
    if (made.ok()) {
      pool = std::move(*made);
    } else {
      DSV4_LOG_WARN("packing the FP4/FP8/INT8 weights on the loading thread alone: {}",
                    made.status().message());
    }
  }
  size_t dropped = 0;
  for (size_t done = 0; done < n || dropped < drops_.size();) {
    const size_t end = std::min(n, done + kBatch);
    ParallelFor(pool.get(), static_cast<int64_t>(end - done), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const PackJob& job = pack_jobs_[done + static_cast<size_t>(i)];
        if (const Fp4Job* j = std::get_if<Fp4Job>(&job)) {
          kernels::PackFp4Panels(j->rows, j->codes, j->scales);
        } else if (const Fp8Job* f = std::get_if<Fp8Job>(&job)) {
          kernels::PackFp8Panels(f->rows, f->codes);
        } else {
          const Int8Job& q = std::get<Int8Job>(job);
          kernels::PackInt8Panels(q.rows, q.codes);
        }
      }
    });
    done = end;
    while (dropped < drops_.size() && drops_[dropped].after_jobs <= done) {
      ckpt.DropResidentPages(drops_[dropped++].tensor);
    }
  }
  pack_jobs_.clear();
  drops_.clear();
}

Result<const bf16*> BindBf16(const checkpoint::Checkpoint& ckpt, const std::string& name,
                             const Shape& shape, WeightStore& store) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* t, ckpt.Require(name, DType::kBF16, shape));
  if (reinterpret_cast<uintptr_t>(t->data) % alignof(bf16) == 0) return t->as<bf16>();
  bf16* copy = store.Allocate<bf16>(t->numel());
  std::memcpy(copy, t->data, t->nbytes());
  return static_cast<const bf16*>(copy);
}

Result<const float*> BindF32(const checkpoint::Checkpoint& ckpt, const std::string& name,
                             const Shape& shape, WeightStore& store) {
  DSV4_ASSIGN_OR_RETURN(const TensorView* t, ckpt.Require(name, DType::kF32, shape));
  if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) return t->as<float>();
  float* copy = store.Allocate<float>(t->numel());
  std::memcpy(copy, t->data, t->nbytes());
  return static_cast<const float*>(copy);
}

Result<const int32_t*> BindIdTable(const checkpoint::Checkpoint& ckpt, const std::string& name,
                                   int64_t rows, int64_t cols, int64_t max_value,
                                   WeightStore& store) {
  const TensorView* found = ckpt.Find(name);
  const bool narrow = found == nullptr || found->dtype != DType::kI32;
  DSV4_ASSIGN_OR_RETURN(const TensorView* t,
                        ckpt.Require(name, narrow ? DType::kI64 : DType::kI32, {rows, cols}));
  const auto* bytes = static_cast<const uint8_t*>(t->data);
  const bool in_place = !narrow && reinterpret_cast<uintptr_t>(t->data) % alignof(int32_t) == 0;
  int32_t* table = in_place ? nullptr : store.Allocate<int32_t>(rows * cols);
  const size_t width = narrow ? 8 : 4;
  // Validation reads vocab x top_k ids (0.8M on Flash): milliseconds, cheap
  // insurance against a corrupt table indexing past the expert list.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      int64_t v;  // the mapped data may be misaligned
      if (narrow) {
        std::memcpy(&v, bytes + (r * cols + c) * width, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, bytes + (r * cols + c) * width, 4);
        v = v32;
      }
      if (v < 0 || v >= max_value) {
        return DataLoss("{}: tensor {} row {} holds id {} outside [0, {})", ckpt.FileOf(name), name,
                        r, v, max_value);
      }
      for (int64_t p = 0; p < c; ++p) {
        int32_t prev;
        std::memcpy(&prev, bytes + (r * cols + p) * width, 4);  // low half of an LE I64 too
        if (prev == v) {
          return DataLoss("{}: tensor {} row {} repeats id {}", ckpt.FileOf(name), name, r, v);
        }
      }
      if (table != nullptr) table[r * cols + c] = static_cast<int32_t>(v);
    }
  }
  return in_place ? t->as<int32_t>() : static_cast<const int32_t*>(table);
}

kernels::Fp8Weight Fp8ForGemm(const kernels::Fp8Weight& w, const std::string& name,
                              WeightStore& store) {
  if (!kernels::Fp8GemmUsesBf16Dots() || w.layout != kernels::Fp8Layout::kRows || w.in % 128 != 0) {
    return w;
  }
  uint8_t* codes = store.Allocate<uint8_t>(kernels::Fp8PanelBytes(w.out, w.in));
  const kernels::Fp8Weight view = store.DeferPack(w, codes);
  store.DropAfterPacking(name + ".weight");
  return view;
}

kernels::Int8Weight InInt8Panels(const kernels::Int8Weight& w, WeightStore& store) {
  if (!kernels::Int8GemmUsesPanels() || w.layout != kernels::Int8Layout::kRows) return w;
  return store.DeferPack(w, store.Allocate<int8_t>(kernels::Int8PanelBytes(w.out, w.in)));
}

kernels::Fp4Weight InPanels(const kernels::Fp4Weight& w, WeightStore& store) {
  if (w.layout == kernels::Fp4Layout::kPanels || w.in % 128 != 0) return w;
  uint8_t* codes = store.Allocate<uint8_t>(kernels::Fp4PanelPackedBytes(w.out, w.in));
  uint8_t* scales = store.Allocate<uint8_t>(kernels::Fp4PanelScaleBytes(w.out, w.in));
  return store.DeferPack(w, codes, scales);
}

Result<kernels::Fp4Weight> BindFp4Weight(const checkpoint::Checkpoint& ckpt,
                                         const std::string& prefix, int64_t out, int64_t in,
                                         WeightStore& store) {
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
  const kernels::Fp4Weight packed = InPanels(r, store);
  if (packed.layout == kernels::Fp4Layout::kPanels) {
    // The copy replaces the mapped bytes: they leave the resident set (the
    // routed experts are most of a checkpoint).
    store.DropAfterPacking(prefix + ".weight");
    store.DropAfterPacking(prefix + ".scale");
  }
  return packed;
}

}  // namespace dsv4::model
