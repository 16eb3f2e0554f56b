#include "model/mhc.h"

#include "base/logging.h"
#include "kernels/mhc.h"

namespace dsv4::model {

HcShape HcShape::FromConfig(const checkpoint::ModelConfig& cfg) {
  HcShape s;
  s.hc = cfg.hc_mult;
  s.dim = cfg.hidden_size;
  s.sinkhorn_iters = cfg.hc_sinkhorn_iters;
  s.norm_eps = static_cast<float>(cfg.rms_norm_eps);
  s.hc_eps = static_cast<float>(cfg.hc_eps);
  return s;
}

Result<HcWeights> LoadHcWeights(const checkpoint::Checkpoint& ckpt, const std::string& prefix,
                                const HcShape& shape, bool head, WeightStore& store) {
  HcWeights w;
  w.num_mix = head ? shape.hc : (2 + shape.hc) * shape.hc;
  DSV4_ASSIGN_OR_RETURN(w.fn, BindF32(ckpt, prefix + "_fn", {w.num_mix, shape.width()}, store));
  DSV4_ASSIGN_OR_RETURN(w.base, BindF32(ckpt, prefix + "_base", {w.num_mix}, store));
  DSV4_ASSIGN_OR_RETURN(w.scale, BindF32(ckpt, prefix + "_scale", {head ? 1 : 3}, store));
  return w;
}

void HcPre(const HcShape& shape, const HcWeights& w, const bf16* x, int64_t n, bf16* a, float* post,
           float* comb, Workspace& ws, ThreadPool* pool) {
  DSV4_CHECK(w.num_mix == (2 + shape.hc) * shape.hc);
  float* mixes =
      ws.Get<float>(WsSlot::kHcMixes, static_cast<size_t>(n * w.num_mix));        // [n, num_mix]
  float* pre = ws.Get<float>(WsSlot::kHcPre, static_cast<size_t>(n * shape.hc));  // [n, hc]
  kernels::HcMixes(x, n, shape.width(), w.fn, w.num_mix, shape.norm_eps, mixes, pool);
  kernels::HcSplitSinkhorn(mixes, n, shape.hc, w.scale, w.base, shape.sinkhorn_iters, shape.hc_eps,
                           pre, post, comb, pool);
  kernels::HcWeightedSum(x, n, shape.hc, shape.dim, pre, a, pool);
}

void HcPost(const HcShape& shape, const bf16* f, const bf16* res, int64_t n, const float* post,
            const float* comb, bf16* y, ThreadPool* pool) {
  DSV4_CHECK(y != res);
  kernels::HcPost(f, res, n, shape.hc, shape.dim, post, comb, y, pool);
}

void HcHead(const HcShape& shape, const HcWeights& w, const bf16* x, int64_t n, bf16* y,
            Workspace& ws, ThreadPool* pool) {
  DSV4_CHECK(w.num_mix == shape.hc);
  float* mixes = ws.Get<float>(WsSlot::kHcMixes, static_cast<size_t>(n * w.num_mix));  // [n, hc]
  float* pre = ws.Get<float>(WsSlot::kHcPre, static_cast<size_t>(n * shape.hc));       // [n, hc]
  kernels::HcMixes(x, n, shape.width(), w.fn, w.num_mix, shape.norm_eps, mixes, pool);
  kernels::HcHeadPre(mixes, n, shape.hc, w.scale[0], w.base, shape.hc_eps, pre);
  kernels::HcWeightedSum(x, n, shape.hc, shape.dim, pre, y, pool);
}

}  // namespace dsv4::model
