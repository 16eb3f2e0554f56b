// Mixture of experts (docs/model.md "MoE"): sqrt-softplus router with hash routing
// (tid2eid) on the first num_hash_layers layers and bias-corrected top-k after,
// MXFP4 routed experts, an FP8 shared expert, clamped SwiGLU, and the
// reference's combine: FP32 sum of the routed outputs in ascending expert id,
// the shared expert last, one BF16 rounding.
//
// Everything is per token (the expert GEMMs are row independent), so a token's
// output never depends on which other tokens share the call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "kernels/gemm.h"
#include "model/expert_usage.h"
#include "model/linear.h"
#include "model/moe_shard.h"
#include "model/weights.h"
#include "model/workspace.h"
#include "tensor/numeric.h"

namespace dsv4::model {

struct MoeShape {
  int64_t dim = 0;           // D
  int64_t inter = 0;         // routed expert width
  int64_t shared_inter = 0;  // shared expert width (n_shared_experts * inter; 0 = none)
  int64_t num_experts = 0;
  int64_t top_k = 0;
  float route_scale = 1;
  float swiglu_limit = 0;

  static MoeShape FromConfig(const checkpoint::ModelConfig& cfg);
};

struct RouterWeights {
  const bf16* gate = nullptr;        // [num_experts, dim], used as FP32
  const float* bias = nullptr;       // [num_experts]; score-routed layers only
  const int32_t* tid2eid = nullptr;  // [vocab, top_k]; hash-routed layers only
  int64_t vocab = 0;                 // rows of tid2eid
};

// Native checkpoints fill w1..w3; W8A8 checkpoints (docs/convert.md) fill
// q1..q3 instead (INT8 per channel, per-token INT8 activations).  Bound from
// the prepacked sidecar (docs/prepack.md), w1 and w3 come fused as w13 / q13
// (gate rows then up rows) and w1/w3 (q1/q3) stay empty: one gate-up GEMM per
// expert instead of two, bitwise identical (each output row is its own dot
// products in a fixed order).
struct RoutedExpertWeights {
  kernels::Fp4Weight w1;                 // gate [inter, dim]
  kernels::Fp4Weight w2;                 // down [dim, inter]
  kernels::Fp4Weight w3;                 // up   [inter, dim]
  kernels::Fp4Weight w13{};              // fused gate-up [2*inter, dim]
  kernels::Int8Weight q1{}, q2{}, q3{};  // W8A8: same roles and shapes
  kernels::Int8Weight q13{};             // W8A8 fused gate-up
  bool is_int8() const { return q2.codes != nullptr; }
};

struct SharedExpertWeights {
  kernels::Fp8Weight w1;                 // gate [shared_inter, dim]
  kernels::Fp8Weight w2;                 // down [dim, shared_inter]
  kernels::Fp8Weight w3;                 // up   [shared_inter, dim]
  kernels::Fp8Weight w13{};              // fused gate-up [2*shared_inter, dim] (sidecar)
  kernels::Int8Weight q1{}, q2{}, q3{};  // W8A8
  kernels::Int8Weight q13{};             // W8A8 fused gate-up (sidecar)
  bool is_int8() const { return q2.codes != nullptr; }
};

struct MoeWeights {
  RouterWeights router;
  std::vector<RoutedExpertWeights> experts;  // [num_experts]
  SharedExpertWeights shared;                // unused when shape.shared_inter == 0
  bool int8 = false;                         // W8A8 experts (all of them, shared included)
  std::vector<Int8Linear> owned;             // keeps the INT8 scales alive
  ExpertShard shard;                         // expert parallelism (moe_shard.h); default: all here
};

// The routed experts [first, last) a process binds: all of them, or one
// rank's block under expert parallelism (the others' views stay empty).
struct ExpertRange {
  int64_t first = 0;
  int64_t last = 0;
};

// Binds `<prefix>.gate.*`, the routed experts and the shared expert (prefix
// e.g. "layers.0.ffn").  Routed experts come from the sidecar's rank-stacked
// `<prefix>.experts.{w13,w2}.*` when the checkpoint has them (an overlay,
// checkpoint.h), else from `<prefix>.experts.{e}.*`; the shared expert from
// `<prefix>.shared_experts.w13.*` + `w2.*` or `w1/w2/w3.*` likewise.  hash
// selects tid2eid routing (no bias).  Only `experts` are bound (last 0: every
// expert); w.experts always has num_experts entries.
Result<MoeWeights> LoadMoeWeights(const checkpoint::Checkpoint& ckpt, const std::string& prefix,
                                  const MoeShape& shape, bool hash, int64_t vocab,
                                  WeightStore& store, ExpertRange experts = {});

// Router.  x [n, dim]; token_ids [n] (hash routing only, may be null otherwise).
// ids/weights [n, top_k]: score-routed rows are in descending biased score
// (ties: lower expert id first), hash-routed rows in table order; weights are
// the unbiased scores renormalized over the row, times route_scale.
// logits [n, num_experts] (FP32) is written if non-null.
// REQUIRES: hash-routed token ids lie in [0, vocab).
void Route(const MoeShape& shape, const RouterWeights& w, const bf16* x, const int32_t* token_ids,
           int64_t n, int32_t* ids, float* weights, float* logits, Workspace& ws, ThreadPool* pool);

// One routed expert on m rows whose activation is already FP8-quantized
// (x_codes [m, dim], x_scales [m, dim/128]); row_weight [m] multiplies the
// SwiGLU output before w2.  y [m, dim] BF16.  For INT8 experts (is_int8())
// x_codes holds per-token INT8 codes [m, dim] (as bytes) and x_scales [m].
void RoutedExpertForward(const MoeShape& shape, const RoutedExpertWeights& w,
                         const uint8_t* x_codes, const float* x_scales, int64_t m,
                         const float* row_weight, bf16* y, Workspace& ws, ThreadPool* pool);

// The shared expert (no routing weight).  y [m, dim] BF16.
void SharedExpertForward(const MoeShape& shape, const SharedExpertWeights& w,
                         const uint8_t* x_codes, const float* x_scales, int64_t m, bf16* y,
                         Workspace& ws, ThreadPool* pool);

// The whole MoE: x [n, dim] -> y [n, dim].  expert_ids_out [n, top_k], if
// non-null, receives each row's routed experts sorted ascending (debugging and
// golden comparison).  usage, if non-null, has every routed expert the n rows
// selected marked (an observer, expert_usage.h; not fed under data-parallel
// attention, whose routing covers every rank's rows).  y must not alias x.
void MoeForward(const MoeShape& shape, const MoeWeights& w, const bf16* x, const int32_t* token_ids,
                int64_t n, bf16* y, int32_t* expert_ids_out, Workspace& ws, ThreadPool* pool,
                LayerExpertUsage* usage = nullptr);

}  // namespace dsv4::model
