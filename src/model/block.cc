#include "model/block.h"

#include "kernels/norm.h"

namespace dsv4 {

Result<std::unique_ptr<Block>> Block::Load(const Checkpoint& ckpt, const ModelConfig& cfg,
                                           int64_t layer_id, const std::string& prefix,
                                           WeightStore& store) {
  std::unique_ptr<Block> b(new Block());
  b->layer_id_ = layer_id;
  b->hc_ = HcShape::FromConfig(cfg);
  b->moe_shape_ = MoeShape::FromConfig(cfg);
  b->norm_eps_ = static_cast<float>(cfg.rms_norm_eps);
  const int64_t d = cfg.hidden_size;
  DSV4_ASSIGN_OR_RETURN(b->attn_, Attention::Load(ckpt, cfg, layer_id, prefix));
  DSV4_ASSIGN_OR_RETURN(b->hc_attn_, LoadHcWeights(ckpt, prefix + "hc_attn", b->hc_, false, store));
  DSV4_ASSIGN_OR_RETURN(b->hc_ffn_, LoadHcWeights(ckpt, prefix + "hc_ffn", b->hc_, false, store));
  DSV4_ASSIGN_OR_RETURN(b->attn_norm_, BindBf16(ckpt, prefix + "attn_norm.weight", {d}, store));
  DSV4_ASSIGN_OR_RETURN(b->ffn_norm_, BindBf16(ckpt, prefix + "ffn_norm.weight", {d}, store));
  DSV4_ASSIGN_OR_RETURN(
      b->moe_, LoadMoeWeights(ckpt, prefix + "ffn", b->moe_shape_, cfg.is_hash_layer(layer_id),
                              cfg.vocab_size, store));
  return b;
}

void Block::Forward(const bf16* in, const ForwardBatch& batch, AttentionCache& cache, bf16* out,
                    Workspace& ws, ThreadPool* pool, BlockTrace* trace) const {
  const int64_t n = batch.num_tokens();
  if (n == 0) return;
  const int64_t d = hc_.dim;
  const auto nd = static_cast<size_t>(n * d);
  bf16* a = ws.Get<bf16>(WsSlot::kBlkA, nd);                                       // [n, D]
  bf16* f = ws.Get<bf16>(WsSlot::kBlkF, nd);                                       // [n, D]
  bf16* mid = ws.Get<bf16>(WsSlot::kBlkMid, nd * static_cast<size_t>(hc_.hc));     // [n, hc, D]
  float* post = ws.Get<float>(WsSlot::kBlkPost, static_cast<size_t>(n * hc_.hc));  // [n, hc]
  float* comb =
      ws.Get<float>(WsSlot::kBlkComb, static_cast<size_t>(n * hc_.hc * hc_.hc));  // [n, hc, hc]

  HcPre(hc_, hc_attn_, in, n, a, post, comb, ws, pool);
  kernels::RmsNorm(a, n, d, attn_norm_, norm_eps_, a);
  attn_->Forward(a, batch, cache, f, ws, pool, trace != nullptr ? &trace->attn : nullptr);
  HcPost(hc_, f, in, n, post, comb, mid);

  HcPre(hc_, hc_ffn_, mid, n, a, post, comb, ws, pool);
  kernels::RmsNorm(a, n, d, ffn_norm_, norm_eps_, a);
  int32_t* ids_out = nullptr;
  if (trace != nullptr) {
    trace->top_k = moe_shape_.top_k;
    trace->expert_ids.assign(static_cast<size_t>(n * moe_shape_.top_k), -1);
    ids_out = trace->expert_ids.data();
  }
  MoeForward(moe_shape_, moe_, a, batch.token_ids.data(), n, f, ids_out, ws, pool);
  HcPost(hc_, f, mid, n, post, comb, out);
}

}  // namespace dsv4
