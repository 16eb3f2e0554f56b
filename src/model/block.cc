#include "model/block.h"

#include <algorithm>
#include <vector>

#include "kernels/norm.h"
#include "profile/profile.h"

namespace dsv4::model {

Result<std::unique_ptr<Block>> Block::Load(const checkpoint::Checkpoint& ckpt,
                                           const checkpoint::ModelConfig& cfg, int64_t layer_id,
                                           const std::string& prefix, WeightStore& store,
                                           ExpertRange experts) {
  std::unique_ptr<Block> b(new Block());
  b->layer_id_ = layer_id;
  b->hc_ = HcShape::FromConfig(cfg);
  b->moe_shape_ = MoeShape::FromConfig(cfg);
  b->norm_eps_ = static_cast<float>(cfg.rms_norm_eps);
  const int64_t d = cfg.hidden_size;
  DSV4_ASSIGN_OR_RETURN(b->attn_, Attention::Load(ckpt, cfg, layer_id, prefix, store));
  DSV4_ASSIGN_OR_RETURN(b->hc_attn_, LoadHcWeights(ckpt, prefix + "hc_attn", b->hc_, false, store));
  DSV4_ASSIGN_OR_RETURN(b->hc_ffn_, LoadHcWeights(ckpt, prefix + "hc_ffn", b->hc_, false, store));
  DSV4_ASSIGN_OR_RETURN(b->attn_norm_, BindBf16(ckpt, prefix + "attn_norm.weight", {d}, store));
  DSV4_ASSIGN_OR_RETURN(b->ffn_norm_, BindBf16(ckpt, prefix + "ffn_norm.weight", {d}, store));
  DSV4_ASSIGN_OR_RETURN(
      b->moe_, LoadMoeWeights(ckpt, prefix + "ffn", b->moe_shape_, cfg.is_hash_layer(layer_id),
                              cfg.vocab_size, store, experts));
  return b;
}

namespace {

// Kernel-level spans of the block's own ops (docs/profiling.md "Kernel
// level"); bytes and flops from the shapes.
void HcPreCost(const HcShape& hc, const HcWeights& w, int64_t n, int64_t layer, profile::Span* s) {
  s->Arg("layer", layer)
      .Arg("bytes", w.num_mix * hc.hc * hc.dim * 4 + n * hc.hc * hc.dim * 2)
      .Arg("flops", 2 * n * w.num_mix * hc.hc * hc.dim);
}

void HcPostCost(const HcShape& hc, int64_t n, int64_t layer, profile::Span* s) {
  s->Arg("layer", layer)
      .Arg("bytes", n * hc.dim * 2 + 2 * n * hc.hc * hc.dim * 2)
      .Arg("flops", n * hc.hc * hc.dim * (2 + 2 * hc.hc));
}

// Routed experts (the distinct experts the rows were sent to, each read
// once), the shared expert and the router.
void MoeCost(const MoeShape& m, const MoeWeights& w, int64_t n, const int32_t* ids, int64_t layer,
             profile::Span* s) {
  std::vector<int32_t> distinct(ids, ids + n * m.top_k);
  std::sort(distinct.begin(), distinct.end());
  const auto experts =
      static_cast<int64_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  // FP4 codes (half a byte) + one E8M0 scale per 32 weights; W8A8 one byte.
  const double per_weight = w.int8 ? 1.0 : 0.5 + 1.0 / 32;
  const double routed = static_cast<double>(experts * 3 * m.inter * m.dim) * per_weight;
  const int64_t shared = 3 * m.shared_inter * m.dim;  // FP8 or INT8
  const int64_t router = m.num_experts * m.dim * 2;
  s->Arg("layer", layer)
      .Arg("experts", experts)
      .Arg("bytes", routed + static_cast<double>(shared + router))
      .Arg("flops", 2 * n * 3 * m.dim * (m.inter * m.top_k + m.shared_inter) +
                        2 * n * m.dim * m.num_experts);
}

}  // namespace

void Block::Forward(const bf16* in, const ForwardBatch& batch, AttentionCache& cache, bf16* out,
                    Workspace& ws, ThreadPool* pool, BlockTrace* trace, ExpertUsage* usage) const {
  const int64_t n = batch.num_tokens();
  if (n == 0) return;
  // Opened first, so the scratch the first call allocates counts to its layer.
  profile::Span layer(profile::kKernel, "kernel", "layer");
  if (layer) layer.Arg("layer", layer_id_).Arg("rows", n);
  const int64_t d = hc_.dim;
  const auto nd = static_cast<size_t>(n * d);
  bf16* a = ws.Get<bf16>(WsSlot::kBlkA, nd);                                       // [n, D]
  bf16* f = ws.Get<bf16>(WsSlot::kBlkF, nd);                                       // [n, D]
  bf16* mid = ws.Get<bf16>(WsSlot::kBlkMid, nd * static_cast<size_t>(hc_.hc));     // [n, hc, D]
  float* post = ws.Get<float>(WsSlot::kBlkPost, static_cast<size_t>(n * hc_.hc));  // [n, hc]
  float* comb =
      ws.Get<float>(WsSlot::kBlkComb, static_cast<size_t>(n * hc_.hc * hc_.hc));  // [n, hc, hc]

  {
    profile::Span s(profile::kKernel, "kernel", "mhc.pre");
    if (s) HcPreCost(hc_, hc_attn_, n, layer_id_, &s);
    HcPre(hc_, hc_attn_, in, n, a, post, comb, ws, pool);
  }
  {
    profile::Span s(profile::kKernel, "kernel", "norm");
    if (s) s.Arg("layer", layer_id_).Arg("bytes", 2 * n * d * 2).Arg("flops", 4 * n * d);
    kernels::RmsNorm(a, n, d, attn_norm_, norm_eps_, a);
  }
  {
    profile::Span s(profile::kKernel, "kernel", "attention");
    if (s) s.Arg("layer", layer_id_).Arg("ratio", attn_->compress_ratio());
    attn_->Forward(a, batch, cache, f, ws, pool, trace != nullptr ? &trace->attn : nullptr);
  }
  {
    profile::Span s(profile::kKernel, "kernel", "mhc.post");
    if (s) HcPostCost(hc_, n, layer_id_, &s);
    HcPost(hc_, f, in, n, post, comb, mid, pool);
  }

  {
    profile::Span s(profile::kKernel, "kernel", "mhc.pre");
    if (s) HcPreCost(hc_, hc_ffn_, n, layer_id_, &s);
    HcPre(hc_, hc_ffn_, mid, n, a, post, comb, ws, pool);
  }
  {
    profile::Span s(profile::kKernel, "kernel", "norm");
    if (s) s.Arg("layer", layer_id_).Arg("bytes", 2 * n * d * 2).Arg("flops", 4 * n * d);
    kernels::RmsNorm(a, n, d, ffn_norm_, norm_eps_, a);
  }
  int32_t* ids_out = nullptr;
  if (trace != nullptr) {
    trace->top_k = moe_shape_.top_k;
    trace->expert_ids.assign(static_cast<size_t>(n * moe_shape_.top_k), -1);
    ids_out = trace->expert_ids.data();
  }
  {
    profile::Span s(profile::kKernel, "kernel", "moe");
    // The routing decides which experts' bytes are read: ask for the ids.
    thread_local std::vector<int32_t> profiled_ids;
    if (s && ids_out == nullptr) {
      profiled_ids.assign(static_cast<size_t>(n * moe_shape_.top_k), -1);
      ids_out = profiled_ids.data();
    }
    MoeForward(moe_shape_, moe_, a, batch.token_ids.data(), n, f, ids_out, ws, pool,
               usage != nullptr ? &usage->layer(layer_id_) : nullptr);
    if (s) MoeCost(moe_shape_, moe_, n, ids_out, layer_id_, &s);
  }
  {
    profile::Span s(profile::kKernel, "kernel", "mhc.post");
    if (s) HcPostCost(hc_, n, layer_id_, &s);
    HcPost(hc_, f, mid, n, post, comb, out, pool);
  }
}

}  // namespace dsv4::model
