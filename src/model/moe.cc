#include "model/moe.h"

#include <cstring>
#include <type_traits>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "kernels/int8_gemm.h"
#include "kernels/moe.h"
#include "kernels/moe_routing.h"
#include "kernels/quant.h"
#include "kernels/scratch.h"
#include "model/linear.h"

namespace dsv4::model {
namespace {

constexpr int64_t kActBlock = 128;  // activation block along K (docs/model.md "Number formats")

size_t Sz(int64_t v) { return static_cast<size_t>(v); }

// Rows per pool task of an expert body's SwiGLU and re-quantization (8 rows
// of Flash's 2,048: ~10 µs), so a decode body's few rows stay on the caller.
constexpr int64_t kGlueRowsPerTask = 8;

// The SwiGLU expert body shared by routed and shared experts: gate/up GEMMs
// (one fused GEMM when w13.out != 0, else w1 and w3), clamped SwiGLU (times
// the routing weight if given), re-quantization, down GEMM.  Gemm is Fp8Gemm
// or Fp4Gemm (FP8 per-128 activations) or Int8Gemm (W8A8: per-token INT8
// activations); W the matching weight type.
template <typename Code, typename W, typename Gemm>
void ExpertBody(const W& w1, const W& w2, const W& w3, const W& w13, int64_t inter, float limit,
                const Code* x_codes, const float* x_scales, int64_t m, const float* row_weight,
                bf16* y, Workspace& ws, ThreadPool* pool, Gemm gemm) {
  constexpr bool kInt8 = std::is_same_v<Code, int8_t>;
  const int64_t num_scales = kInt8 ? 1 : inter / kActBlock;       // per row
  bf16* h = ws.Get<bf16>(WsSlot::kMoeH, Sz(m * inter));           // [m, inter]
  Code* hq = ws.Get<Code>(WsSlot::kMoeHq, Sz(m * inter));         // [m, inter]
  float* hs = ws.Get<float>(WsSlot::kMoeHs, Sz(m * num_scales));  // [m, num_scales]
  // Gate and up rows: one [m, 2*inter] gate | up array when fused, else two.
  const bf16* gate = nullptr;
  const bf16* up = nullptr;
  int64_t ld = inter;
  if (w13.out != 0) {
    // One activation pass and one pool dispatch for both projections.
    bf16* gu = ws.Get<bf16>(WsSlot::kMoeGu, Sz(m * 2 * inter));
    gemm(x_codes, x_scales, m, w13, gu, pool);
    gate = gu;
    up = gu + inter;
    ld = 2 * inter;
  } else {
    bf16* g = ws.Get<bf16>(WsSlot::kMoeG, Sz(m * inter));  // [m, inter]
    bf16* u = ws.Get<bf16>(WsSlot::kMoeU, Sz(m * inter));  // [m, inter]
    gemm(x_codes, x_scales, m, w1, g, pool);
    gemm(x_codes, x_scales, m, w3, u, pool);
    gate = g;
    up = u;
  }
  // SwiGLU and the FP8 re-quantization are per row, so any split over the
  // pool gives the same bits: a prefill's expert has hundreds of rows, which
  // ran on the calling thread while the others waited.
  ParallelFor(pool, m, kGlueRowsPerTask, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      kernels::SwiGlu(gate + r * ld, up + r * ld, 1, inter, limit,
                      row_weight != nullptr ? row_weight + r : nullptr, h + r * inter);
    }
    if constexpr (!kInt8) {
      kernels::ActQuantFp8(h + r0 * inter, r1 - r0, inter, kActBlock, hq + r0 * inter,
                           hs + r0 * num_scales);
    }
  });
  if constexpr (kInt8) kernels::ActQuantInt8PerToken(h, m, inter, hq, hs, pool);
  gemm(hq, hs, m, w2, y, pool);
}

const int8_t* AsInt8(const uint8_t* p) { return reinterpret_cast<const int8_t*>(p); }

}  // namespace

MoeShape MoeShape::FromConfig(const checkpoint::ModelConfig& cfg) {
  MoeShape s;
  s.dim = cfg.hidden_size;
  s.inter = cfg.moe_intermediate_size;
  s.shared_inter = cfg.n_shared_experts * cfg.moe_intermediate_size;
  s.num_experts = cfg.n_routed_experts;
  s.top_k = cfg.num_experts_per_tok;
  s.route_scale = static_cast<float>(cfg.routed_scaling_factor);
  s.swiglu_limit = static_cast<float>(cfg.swiglu_limit);
  return s;
}

namespace {

// The sidecar's rank-stacked experts: `<prefix>.experts.w13.*` [R, E/R, 2*inter, ...]
// and `w2.*` [R, E/R, dim, ...].  Ranks hold consecutive experts, so expert e
// is entry e of the flattened leading [R*E/R] dims, whatever R is (one process
// binds every rank's experts).
Status BindStackedExperts(const checkpoint::Checkpoint& ckpt, const std::string& prefix,
                          const MoeShape& shape, ExpertRange range, MoeWeights& w,
                          WeightStore& store) {
  const std::string p = prefix + ".experts.";
  const TensorView* probe = ckpt.Find(p + "w13.weight");
  const int64_t e = shape.num_experts;
  const int64_t r = probe->shape.empty() ? 0 : probe->dim(0);
  if (r < 1 || e % r != 0) {
    return InvalidArgument("{}: tensor '{}w13.weight' has {} ranks for {} experts",
                           ckpt.FileOf(p + "w13.weight"), p, r, e);
  }
  const int64_t el = e / r;
  const int64_t d = shape.dim;
  const int64_t in = shape.inter;
  w.int8 = probe->shape.size() == 4 && probe->dim(3) == d;
  const int64_t cw = w.int8 ? 1 : 2;  // input elements per code byte
  DSV4_ASSIGN_OR_RETURN(const TensorView* w13,
                        ckpt.Require(p + "w13.weight", DType::kI8, {r, el, 2 * in, d / cw}));
  DSV4_ASSIGN_OR_RETURN(const TensorView* w2,
                        ckpt.Require(p + "w2.weight", DType::kI8, {r, el, d, in / cw}));
  const DType sd = w.int8 ? DType::kF32 : DType::kF8E8M0;
  const Shape s13 = w.int8 ? Shape{r, el, 2 * in} : Shape{r, el, 2 * in, d / 32};
  const Shape s2 = w.int8 ? Shape{r, el, d} : Shape{r, el, d, in / 32};
  DSV4_ASSIGN_OR_RETURN(const TensorView* w13s, ckpt.Require(p + "w13.scale", sd, s13));
  DSV4_ASSIGN_OR_RETURN(const TensorView* w2s, ckpt.Require(p + "w2.scale", sd, s2));
  const auto* c13 = w13->as<uint8_t>();
  const auto* c2 = w2->as<uint8_t>();
  w.experts.resize(Sz(e));
  for (int64_t i = range.first; i < range.last; ++i) {
    RoutedExpertWeights& x = w.experts[Sz(i)];
    if (w.int8) {
      x.q13 = InInt8Panels({reinterpret_cast<const int8_t*>(c13) + i * 2 * in * d,
                            w13s->as<float>() + i * 2 * in, 2 * in, d},
                           store);
      x.q2 = InInt8Panels(
          {reinterpret_cast<const int8_t*>(c2) + i * d * in, w2s->as<float>() + i * d, d, in},
          store);
    } else {
      x.w13 = InPanels(
          {c13 + i * 2 * in * (d / 2), w13s->as<uint8_t>() + i * 2 * in * (d / 32), 2 * in, d},
          store);
      x.w2 =
          InPanels({c2 + i * d * (in / 2), w2s->as<uint8_t>() + i * d * (in / 32), d, in}, store);
    }
  }
  // The copies replace the mapped bytes (as BindFp4Weight's do); INT8
  // experts keep their scales in place.
  if (!w.int8) {
    for (const char* t : {"w13.weight", "w13.scale", "w2.weight", "w2.scale"}) {
      store.DropAfterPacking(p + t);
    }
  } else if (kernels::Int8GemmUsesPanels()) {
    for (const char* t : {"w13.weight", "w2.weight"}) store.DropAfterPacking(p + t);
  }
  return Status::Ok();
}

Status BindExperts(const checkpoint::Checkpoint& ckpt, const std::string& prefix,
                   const MoeShape& shape, ExpertRange range, MoeWeights& w, WeightStore& store) {
  w.experts.resize(Sz(shape.num_experts));
  // Routed experts are MXFP4 natively, unpacked INT8 in W8A8 checkpoints.
  const TensorView* probe =
      ckpt.Find(prefix + ".experts." + std::to_string(range.first) + ".w1.weight");
  w.int8 = probe != nullptr && probe->dtype == DType::kI8 && probe->dim(1) == shape.dim;
  auto int8 = [&](const std::string& name, int64_t out, int64_t in) -> Result<kernels::Int8Weight> {
    DSV4_ASSIGN_OR_RETURN(Int8Linear l, Int8Linear::Load(ckpt, name, out, in, store));
    w.owned.push_back(std::move(l));  // Buffer storage does not move with the vector
    return w.owned.back().weight();
  };
  for (int64_t e = range.first; e < range.last; ++e) {
    const std::string p = prefix + ".experts." + std::to_string(e) + ".";
    RoutedExpertWeights& x = w.experts[Sz(e)];
    if (w.int8) {
      DSV4_ASSIGN_OR_RETURN(x.q1, int8(p + "w1", shape.inter, shape.dim));
      DSV4_ASSIGN_OR_RETURN(x.q2, int8(p + "w2", shape.dim, shape.inter));
      DSV4_ASSIGN_OR_RETURN(x.q3, int8(p + "w3", shape.inter, shape.dim));
      continue;
    }
    DSV4_ASSIGN_OR_RETURN(x.w1, BindFp4Weight(ckpt, p + "w1", shape.inter, shape.dim, store));
    DSV4_ASSIGN_OR_RETURN(x.w2, BindFp4Weight(ckpt, p + "w2", shape.dim, shape.inter, store));
    DSV4_ASSIGN_OR_RETURN(x.w3, BindFp4Weight(ckpt, p + "w3", shape.inter, shape.dim, store));
  }
  return Status::Ok();
}

// The shared expert, in the routed experts' format (w.int8).  The sidecar's
// fused `w13` replaces w1 and w3 when present.
Status BindSharedExpert(const checkpoint::Checkpoint& ckpt, const std::string& prefix,
                        const MoeShape& shape, MoeWeights& w, WeightStore& store) {
  const std::string p = prefix + ".shared_experts.";
  const int64_t si = shape.shared_inter;
  const int64_t d = shape.dim;
  const bool fused = ckpt.Find(p + "w13.weight") != nullptr;
  auto int8 = [&](const std::string& name, int64_t out, int64_t in) -> Result<kernels::Int8Weight> {
    DSV4_ASSIGN_OR_RETURN(Int8Linear l, Int8Linear::Load(ckpt, name, out, in, store));
    w.owned.push_back(std::move(l));
    return w.owned.back().weight();
  };
  // The weight's views point into the mapping or the store (its panel copy).
  auto fp8 = [&](const std::string& name, int64_t out, int64_t in) -> Result<kernels::Fp8Weight> {
    DSV4_ASSIGN_OR_RETURN(Fp8Linear l, Fp8Linear::Load(ckpt, name, out, in, store));
    return l.weight();
  };
  SharedExpertWeights& x = w.shared;
  if (w.int8) {
    DSV4_ASSIGN_OR_RETURN(x.q2, int8(p + "w2", d, si));
    if (fused) {
      DSV4_ASSIGN_OR_RETURN(x.q13, int8(p + "w13", 2 * si, d));
      return Status::Ok();
    }
    DSV4_ASSIGN_OR_RETURN(x.q1, int8(p + "w1", si, d));
    DSV4_ASSIGN_OR_RETURN(x.q3, int8(p + "w3", si, d));
    return Status::Ok();
  }
  DSV4_ASSIGN_OR_RETURN(x.w2, fp8(p + "w2", d, si));
  if (fused) {
    DSV4_ASSIGN_OR_RETURN(x.w13, fp8(p + "w13", 2 * si, d));
    return Status::Ok();
  }
  DSV4_ASSIGN_OR_RETURN(x.w1, fp8(p + "w1", si, d));
  DSV4_ASSIGN_OR_RETURN(x.w3, fp8(p + "w3", si, d));
  return Status::Ok();
}

}  // namespace

Result<MoeWeights> LoadMoeWeights(const checkpoint::Checkpoint& ckpt, const std::string& prefix,
                                  const MoeShape& shape, bool hash, int64_t vocab,
                                  WeightStore& store, ExpertRange experts) {
  if (experts.last == 0) experts.last = shape.num_experts;
  if (experts.first < 0 || experts.first >= experts.last || experts.last > shape.num_experts) {
    return InvalidArgument("{}: routed experts [{}, {}) outside the model's {}", prefix,
                           experts.first, experts.last, shape.num_experts);
  }
  MoeWeights w;
  const std::string gate = prefix + ".gate.";
  DSV4_ASSIGN_OR_RETURN(w.router.gate,
                        BindBf16(ckpt, gate + "weight", {shape.num_experts, shape.dim}, store));
  if (hash) {
    DSV4_ASSIGN_OR_RETURN(w.router.tid2eid, BindIdTable(ckpt, gate + "tid2eid", vocab, shape.top_k,
                                                        shape.num_experts, store));
    w.router.vocab = vocab;
  } else {
    DSV4_ASSIGN_OR_RETURN(w.router.bias, BindF32(ckpt, gate + "bias", {shape.num_experts}, store));
  }
  w.owned.reserve(Sz(3 * shape.num_experts + 3));
  if (ckpt.Find(prefix + ".experts.w13.weight") != nullptr) {
    DSV4_RETURN_IF_ERROR(BindStackedExperts(ckpt, prefix, shape, experts, w, store));
  } else {
    DSV4_RETURN_IF_ERROR(BindExperts(ckpt, prefix, shape, experts, w, store));
  }
  if (shape.shared_inter > 0) DSV4_RETURN_IF_ERROR(BindSharedExpert(ckpt, prefix, shape, w, store));
  return w;
}

void Route(const MoeShape& shape, const RouterWeights& w, const bf16* x, const int32_t* token_ids,
           int64_t n, int32_t* ids, float* weights, float* logits, Workspace& ws,
           ThreadPool* pool) {
  const int64_t e = shape.num_experts;
  const int64_t k = shape.top_k;
  if (logits == nullptr) logits = ws.Get<float>(WsSlot::kMoeLogits, Sz(n * e));  // [n, e]
  float* scores = ws.Get<float>(WsSlot::kMoeScores, Sz(n * e));                  // [n, e]
  kernels::GemmBf16F32(x, n, shape.dim, w.gate, e, logits, pool);
  kernels::SqrtSoftplus(logits, n * e, scores);
  if (w.tid2eid != nullptr) {
    kernels::HashRoute(w.tid2eid, w.vocab, token_ids, n, k, ids);
  } else {
    kernels::BiasedTopK(scores, w.bias, n, e, k, ids, pool);
  }
  kernels::RouteWeights(scores, n, e, ids, k, shape.route_scale, weights, pool);
}

void RoutedExpertForward(const MoeShape& shape, const RoutedExpertWeights& w,
                         const uint8_t* x_codes, const float* x_scales, int64_t m,
                         const float* row_weight, bf16* y, Workspace& ws, ThreadPool* pool) {
  if (w.is_int8()) {
    return ExpertBody(w.q1, w.q2, w.q3, w.q13, shape.inter, shape.swiglu_limit, AsInt8(x_codes),
                      x_scales, m, row_weight, y, ws, pool, kernels::Int8Gemm);
  }
  ExpertBody(w.w1, w.w2, w.w3, w.w13, shape.inter, shape.swiglu_limit, x_codes, x_scales, m,
             row_weight, y, ws, pool, kernels::Fp4Gemm);
}

void SharedExpertForward(const MoeShape& shape, const SharedExpertWeights& w,
                         const uint8_t* x_codes, const float* x_scales, int64_t m, bf16* y,
                         Workspace& ws, ThreadPool* pool) {
  if (w.is_int8()) {
    return ExpertBody(w.q1, w.q2, w.q3, w.q13, shape.shared_inter, shape.swiglu_limit,
                      AsInt8(x_codes), x_scales, m, nullptr, y, ws, pool, kernels::Int8Gemm);
  }
  ExpertBody(w.w1, w.w2, w.w3, w.w13, shape.shared_inter, shape.swiglu_limit, x_codes, x_scales, m,
             nullptr, y, ws, pool, kernels::Fp8Gemm);
}

namespace {

// Calls of at most this many tokens (decode steps, speculative verifies) run
// the FP8/FP4 experts batched (BatchedExperts); longer ones keep one expert
// at a time, whose buffers are O(max rows of one expert) instead of
// O(n·top_k) and whose GEMMs are long enough that a dispatch each costs
// nothing.
constexpr int64_t kBatchedMaxTokens = 16;

struct MoeJobsTag {};
struct MoeBodiesTag {};

// Adds the gate/up GEMMs of one expert body to jobs: the fused w13 into gu
// [m, 2·inter], or w1 into g and w3 into u ([m, inter] each).
template <typename W>
int64_t AddGateUp(const W& w1, const W& w3, const W& w13, const uint8_t* codes, const float* scales,
                  int64_t m, bf16* gu, bf16* g, bf16* u, kernels::BlockScaledGemm* jobs) {
  auto job = [&](const W& wt, bf16* y) {
    kernels::BlockScaledGemm j{codes, scales, m, nullptr, nullptr, y};
    if constexpr (std::is_same_v<W, kernels::Fp4Weight>) {
      j.fp4 = &wt;
    } else {
      j.fp8 = &wt;
    }
    return j;
  };
  if (w13.out != 0) {
    jobs[0] = job(w13, gu);
    return 1;
  }
  jobs[0] = job(w1, g);
  jobs[1] = job(w3, u);
  return 2;
}

// SwiGLU of one expert body's gate/up output (as ExpertBody) into h [m, inter].
void SwiGluBody(bool fused, const bf16* gu, const bf16* g, const bf16* u, int64_t m, int64_t inter,
                float limit, const float* row_weight, bf16* h) {
  if (!fused) return kernels::SwiGlu(g, u, m, inter, limit, row_weight, h);
  for (int64_t r = 0; r < m; ++r) {
    kernels::SwiGlu(gu + r * 2 * inter, gu + r * 2 * inter + inter, 1, inter, limit,
                    row_weight != nullptr ? row_weight + r : nullptr, h + r * inter);
  }
}

// The FP8/FP4 routed experts and the shared expert of a short batch, as two
// kernel dispatches: every active expert's gate/up GEMMs (and the shared
// expert's) in one BlockScaledGemmBatch, SwiGLU and re-quantization per
// expert, then every down GEMM in a second batch.  Bitwise equal to
// ExpertBody run expert by expert (the batch equals separate GEMM calls, and
// SwiGLU and quantization are per row), and acc receives the routed outputs
// in ascending expert id as in MoeForward's loop.  xq/xs: the n rows'
// activation codes and scales; offset/ptok/pw: SortByExpert's output; ysh
// [n, d]: the shared expert's output (shape.shared_inter > 0).
void BatchedExperts(const MoeShape& shape, const MoeWeights& w, const uint8_t* xq, const float* xs,
                    int64_t n, const int64_t* offset, const int64_t* ptok, const float* pw,
                    float* acc, bf16* ysh, Workspace& ws, ThreadPool* pool) {
  const int64_t d = shape.dim, e = shape.num_experts, in = shape.inter;
  const int64_t si = shape.shared_inter;
  const int64_t nb = d / kActBlock;
  const int64_t na = offset[e];  // routed rows, sorted by expert
  const int64_t ns = si > 0 ? n : 0;
  // Rows of every expert body side by side: routed rows [0, na) of width
  // inter, then the shared expert's n rows of width si.
  const int64_t h_elems = na * in + ns * si;
  bf16* gu = ws.Get<bf16>(WsSlot::kMoeGu, Sz(2 * h_elems));
  bf16* u = ws.Get<bf16>(WsSlot::kMoeU, Sz(h_elems));
  bf16* h = ws.Get<bf16>(WsSlot::kMoeH, Sz(h_elems));
  uint8_t* hq = ws.Get<uint8_t>(WsSlot::kMoeHq, Sz(h_elems));
  float* hs = ws.Get<float>(WsSlot::kMoeHs, Sz(h_elems / kActBlock));
  bf16* ye = ws.Get<bf16>(WsSlot::kMoeYe, Sz(na * d));  // [na, d]
  // Gathered rows of the experts whose tokens are not consecutive (none
  // for one token).
  uint8_t* eq = n == 1 ? nullptr : ws.Get<uint8_t>(WsSlot::kMoeEq, Sz(na * d));
  float* es = n == 1 ? nullptr : ws.Get<float>(WsSlot::kMoeEs, Sz(na * nb));
  kernels::BlockScaledGemm* jobs =
      kernels::ScratchArray<MoeJobsTag, kernels::BlockScaledGemm>::Get(Sz(2 * e + 2));

  // Gate/up of every active expert, then of the shared expert.
  int64_t count = 0;
  for (int64_t i = 0; i < e; ++i) {
    const int64_t r0 = offset[i], m = offset[i + 1] - r0;
    if (m == 0) continue;
    // Rows that are consecutive tokens (a verify step's experts mostly read
    // both rows or one) are read in place: experts with the same rows then
    // point at the same codes, and BlockScaledGemmBatch builds their FP4
    // records once instead of once per expert.
    const int64_t first = ptok[r0];
    const uint8_t* codes = xq + first * d;
    const float* scales = xs + first * nb;
    if (ptok[r0 + m - 1] - first != m - 1) {
      kernels::GatherRows(xq, xs, d, nb, ptok + r0, m, eq + r0 * d, es + r0 * nb);
      codes = eq + r0 * d;
      scales = es + r0 * nb;
    }
    const RoutedExpertWeights& x = w.experts[Sz(i)];
    count += AddGateUp(x.w1, x.w3, x.w13, codes, scales, m, gu + 2 * r0 * in, gu + r0 * in,
                       u + r0 * in, jobs + count);
  }
  const int64_t hsh = na * in;  // the shared expert's first element in h-sized buffers
  if (ns > 0) {
    const SharedExpertWeights& x = w.shared;
    count += AddGateUp(x.w1, x.w3, x.w13, xq, xs, n, gu + 2 * hsh, gu + hsh, u + hsh, jobs + count);
  }
  kernels::BlockScaledGemmBatch(jobs, count, pool);

  // SwiGLU (with the routing weights) and re-quantization, per expert body
  // (expert i < e, or the shared expert as body e) over the pool: both are
  // per row, so any split gives the same bits, and at decode the 7 bodies'
  // ~14K exp() calls and quantization no longer run on one thread between
  // the two dispatches.
  int64_t* bodies = kernels::ScratchArray<MoeBodiesTag, int64_t>::Get(Sz(e + 1));
  int64_t num_bodies = 0;
  for (int64_t i = 0; i < e; ++i) {
    if (offset[i + 1] > offset[i]) bodies[num_bodies++] = i;
  }
  if (ns > 0) bodies[num_bodies++] = e;
  ParallelFor(pool, num_bodies, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t i = bodies[b];
      if (i == e) {
        SwiGluBody(w.shared.w13.out != 0, gu + 2 * hsh, gu + hsh, u + hsh, n, si,
                   shape.swiglu_limit, nullptr, h + hsh);
        kernels::ActQuantFp8(h + hsh, n, si, kActBlock, hq + hsh, hs + hsh / kActBlock);
        continue;
      }
      const int64_t r0 = offset[i], m = offset[i + 1] - r0;
      const RoutedExpertWeights& x = w.experts[Sz(i)];
      SwiGluBody(x.w13.out != 0, gu + 2 * r0 * in, gu + r0 * in, u + r0 * in, m, in,
                 shape.swiglu_limit, pw + r0, h + r0 * in);
      kernels::ActQuantFp8(h + r0 * in, m, in, kActBlock, hq + r0 * in, hs + r0 * in / kActBlock);
    }
  });

  // Down projections.
  count = 0;
  for (int64_t i = 0; i < e; ++i) {
    const int64_t r0 = offset[i], m = offset[i + 1] - r0;
    if (m == 0) continue;
    jobs[count++] = {hq + r0 * in, hs + r0 * in / kActBlock, m,
                     nullptr,      &w.experts[Sz(i)].w2,     ye + r0 * d};
  }
  if (ns > 0) {
    jobs[count++] = {hq + hsh, hs + hsh / kActBlock, n, &w.shared.w2, nullptr, ysh};
  }
  kernels::BlockScaledGemmBatch(jobs, count, pool);

  for (int64_t i = 0; i < e; ++i) {
    const int64_t r0 = offset[i], m = offset[i + 1] - r0;
    if (m > 0) kernels::ScatterAddRows(ye + r0 * d, ptok + r0, m, d, acc, pool);
  }
}

}  // namespace

void MoeForward(const MoeShape& shape, const MoeWeights& w, const bf16* x, const int32_t* token_ids,
                int64_t n, bf16* y, int32_t* expert_ids_out, Workspace& ws, ThreadPool* pool,
                LayerExpertUsage* usage) {
  if (w.shard.data_parallel && w.shard.active()) {  // DP attention across ranks (moe_shard.h)
    return DataParallelMoe(shape, w, x, token_ids, n, y, expert_ids_out, ws, pool);
  }
  if (n == 0) return;
  const int64_t d = shape.dim;
  const int64_t e = shape.num_experts;
  const int64_t k = shape.top_k;
  const int64_t nb = w.int8 ? 1 : d / kActBlock;            // activation scales per row
  const int64_t na = n * k;                                 // assignments
  int32_t* ids = ws.Get<int32_t>(WsSlot::kMoeIds, Sz(na));  // [n, k]
  float* rw = ws.Get<float>(WsSlot::kMoeRw, Sz(na));        // [n, k]
  Route(shape, w.router, x, token_ids, n, ids, rw, nullptr, ws, pool);
  if (usage != nullptr) usage->Mark(ids, na);

  // The activation is quantized once; per-row quantization makes gathering
  // codes identical to quantizing each expert's gathered rows.
  uint8_t* xq = ws.Get<uint8_t>(WsSlot::kMoeXq, Sz(n * d));  // [n, d] FP8 or INT8 codes
  float* xs = ws.Get<float>(WsSlot::kMoeXs, Sz(n * nb));     // [n, nb]
  if (w.int8) {
    kernels::ActQuantInt8PerToken(x, n, d, reinterpret_cast<int8_t*>(xq), xs, pool);
  } else {
    kernels::ActQuantFp8(x, n, d, kActBlock, xq, xs);
  }

  // Assignments sorted by expert (tokens ascending inside an expert).
  int64_t* offset = ws.Get<int64_t>(WsSlot::kMoeOff, Sz(e + 1));  // [e + 1]
  int64_t* ptok =
      ws.Get<int64_t>(WsSlot::kMoePtok, Sz(na));      // [na] token of each sorted assignment
  float* pw = ws.Get<float>(WsSlot::kMoePw, Sz(na));  // [na] its routing weight
  const int64_t max_rows = kernels::SortByExpert(ids, rw, n, k, e, offset, ptok, pw);
  if (w.shard.active()) {  // expert parallelism over ranks (moe_shard.h)
    return ShardedMoeTail(shape, w, xq, xs, nb, n, ids, offset, ptok, pw, max_rows, y,
                          expert_ids_out, ws, pool);
  }

  // y starts at zero in FP32 and each expert, in ascending id, adds its BF16
  // output to its tokens: exactly the reference's order, with O(n*d) memory
  // rather than O(n*top_k*d).
  float* acc = ws.Get<float>(WsSlot::kMoeAcc, Sz(n * d));  // [n, d]
  std::memset(acc, 0, Sz(n * d) * sizeof(float));
  bf16* ysh = shape.shared_inter > 0 ? ws.Get<bf16>(WsSlot::kMoeYsh, Sz(n * d)) : nullptr;
  if (!w.int8 && n <= kBatchedMaxTokens) {
    BatchedExperts(shape, w, xq, xs, n, offset, ptok, pw, acc, ysh, ws, pool);
    kernels::CombineExperts(acc, ysh, n, d, y, pool);  // the shared expert last
    if (expert_ids_out != nullptr) kernels::SortRowsAscending(ids, n, k, expert_ids_out);
    return;
  }
  uint8_t* eq = ws.Get<uint8_t>(WsSlot::kMoeEq, Sz(max_rows * d));  // [rows, d] gathered codes
  float* es = ws.Get<float>(WsSlot::kMoeEs, Sz(max_rows * nb));     // [rows, d/128]
  bf16* ye = ws.Get<bf16>(WsSlot::kMoeYe, Sz(max_rows * d));        // [rows, d]
  for (int64_t i = 0; i < e; ++i) {
    const int64_t m = offset[i + 1] - offset[i];
    if (m == 0) continue;
    const int64_t* tok = ptok + offset[i];
    kernels::GatherRows(xq, xs, d, nb, tok, m, eq, es);
    RoutedExpertForward(shape, w.experts[Sz(i)], eq, es, m, pw + offset[i], ye, ws, pool);
    kernels::ScatterAddRows(ye, tok, m, d, acc, pool);
  }
  if (ysh != nullptr) {
    SharedExpertForward(shape, w.shared, xq, xs, n, ysh, ws, pool);
  }
  kernels::CombineExperts(acc, ysh, n, d, y, pool);  // the shared expert last
  if (expert_ids_out != nullptr) kernels::SortRowsAscending(ids, n, k, expert_ids_out);
}

}  // namespace dsv4::model
