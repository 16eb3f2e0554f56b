// Manifold-constrained hyper-connections around each sub-layer and before the
// head (docs/model.md "Block and mHC"): thin wrappers that chain the kernels/mhc.h steps with
// workspace scratch.  Everything is per token: row t of every output depends
// only on row t of the input (batch invariance).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "model/weights.h"
#include "model/workspace.h"
#include "tensor/numeric.h"

namespace dsv4::model {

// Shapes and constants shared by every mHC call of a model.
struct HcShape {
  int64_t hc = 0;              // streams (hc_mult)
  int64_t dim = 0;             // D
  int64_t sinkhorn_iters = 0;  // total row/column rounds
  float norm_eps = 1e-6f;      // rms of the mixes (rms_norm_eps)
  float hc_eps = 1e-6f;        // Sinkhorn and pre epsilon

  static HcShape FromConfig(const checkpoint::ModelConfig& cfg);
  int64_t width() const { return hc * dim; }
};

// One mixing head: hc_attn_* / hc_ffn_* (num_mix = (2+hc)*hc) or hc_head_*
// (num_mix = hc, scale has one entry).  FP32, owned by a WeightStore.
struct HcWeights {
  const float* fn = nullptr;     // [num_mix, hc*dim]
  const float* base = nullptr;   // [num_mix]
  const float* scale = nullptr;  // [3] (sub-layer) or [1] (head)
  int64_t num_mix = 0;
};

// Loads `<prefix>_fn`, `<prefix>_base`, `<prefix>_scale` (e.g. prefix
// "layers.3.hc_attn" or "mtp.0.hc_head").  head selects the hc_head shapes.
Result<HcWeights> LoadHcWeights(const checkpoint::Checkpoint& ckpt, const std::string& prefix,
                                const HcShape& shape, bool head, WeightStore& store);

// hc_pre: x [n, hc, dim] -> a [n, dim] (BF16), post [n, hc], comb [n, hc, hc]
// (row j = source stream).
void HcPre(const HcShape& shape, const HcWeights& w, const bf16* x, int64_t n, bf16* a, float* post,
           float* comb, Workspace& ws, ThreadPool* pool);

// hc_post: y[t, k] = bf16(post[t,k]*f[t] + sum_j comb[t,j,k]*res[t,j]).
// f [n, dim], res and y [n, hc, dim]; y must not alias res.
void HcPost(const HcShape& shape, const bf16* f, const bf16* res, int64_t n, const float* post,
            const float* comb, bf16* y, ThreadPool* pool);

// hc_head: y [n, dim] = bf16(sum_j pre[t, j] * x[t, j]) with the head's own
// single-scale sigmoid weights (no Sinkhorn, no post).
void HcHead(const HcShape& shape, const HcWeights& w, const bf16* x, int64_t n, bf16* y,
            Workspace& ws, ThreadPool* pool);

}  // namespace dsv4::model
