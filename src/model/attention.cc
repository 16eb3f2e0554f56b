#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/logging.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/quant.h"
#include "kernels/rope.h"
#include "model/attention_weights.h"
#include "model/compressor.h"
#include "model/indexer.h"
#include "model/linear.h"

namespace dsv4::model {

namespace {

Status CheckGeometry(const checkpoint::ModelConfig& cfg, int64_t layer_id,
                     const std::string& prefix) {
  if (layer_id < 0 || layer_id >= static_cast<int64_t>(cfg.compress_ratios.size())) {
    return InvalidArgument("{}: layer id {} outside compress_ratios (size {})", prefix, layer_id,
                           cfg.compress_ratios.size());
  }
  const int64_t r = cfg.compress_ratio(layer_id);
  if (r != 0 && r != 4 && r != 128) {
    return InvalidArgument("{}: compress ratio {} is not 0, 4 or 128", prefix, r);
  }
  if (cfg.head_dim <= cfg.qk_rope_head_dim || cfg.qk_rope_head_dim % 2 != 0 ||
      cfg.nope_head_dim() % 64 != 0 || cfg.o_groups <= 0 ||
      cfg.num_attention_heads % cfg.o_groups != 0 || cfg.sliding_window <= 0) {
    return InvalidArgument(
        "{}: unsupported attention geometry (head_dim {}, rope {}, heads {}, "
        "o_groups {}, sliding_window {})",
        prefix, cfg.head_dim, cfg.qk_rope_head_dim, cfg.num_attention_heads, cfg.o_groups,
        cfg.sliding_window);
  }
  return Status::Ok();
}

// RoPE profile of a layer (docs/model.md "RoPE and YaRN"): ratio 0 -> rope_theta without
// YaRN; ratio 4/128 -> compress_rope_theta with YaRN.
std::vector<float> LayerFrequencies(const checkpoint::ModelConfig& cfg, int64_t ratio) {
  kernels::YarnParams yarn;
  double base = cfg.rope_theta;
  if (ratio != 0) {
    base = cfg.compress_rope_theta;
    yarn.enabled = cfg.rope_scaling.type == "yarn";
    yarn.factor = cfg.rope_scaling.factor;
    yarn.original_max_position =
        static_cast<double>(cfg.rope_scaling.original_max_position_embeddings);
    yarn.beta_fast = cfg.rope_scaling.beta_fast;
    yarn.beta_slow = cfg.rope_scaling.beta_slow;
  }
  std::vector<float> f(static_cast<size_t>(cfg.qk_rope_head_dim / 2));
  kernels::RopeFrequencies(base, cfg.qk_rope_head_dim, yarn, f.data());
  return f;
}

Result<std::unique_ptr<AttentionWeights>> LoadWeights(const checkpoint::Checkpoint& ckpt,
                                                      const checkpoint::ModelConfig& cfg,
                                                      const std::string& p, int64_t ratio,
                                                      WeightStore& store) {
  auto w = std::make_unique<AttentionWeights>();
  w->dim = cfg.hidden_size;
  w->n_heads = cfg.num_attention_heads;
  w->head_dim = cfg.head_dim;
  w->rope_dim = cfg.qk_rope_head_dim;
  w->q_lora = cfg.q_lora_rank;
  w->n_groups = cfg.o_groups;
  w->o_lora = cfg.o_lora_rank;
  w->window = cfg.sliding_window;
  w->index_head_dim = ratio == 4 ? cfg.index_head_dim : 0;
  w->eps = static_cast<float>(cfg.rms_norm_eps);
  w->softmax_scale = static_cast<float>(std::pow(static_cast<double>(cfg.head_dim), -0.5));
  const int64_t hd = w->n_heads * w->head_dim;
  DSV4_ASSIGN_OR_RETURN(w->wq_a, Linear::Load(ckpt, p + "wq_a", w->q_lora, w->dim, store));
  DSV4_ASSIGN_OR_RETURN(w->q_norm, LoadBf16Copy(ckpt, p + "q_norm.weight", {w->q_lora}));
  DSV4_ASSIGN_OR_RETURN(w->wq_b, Linear::Load(ckpt, p + "wq_b", hd, w->q_lora, store));
  DSV4_ASSIGN_OR_RETURN(w->wkv, Linear::Load(ckpt, p + "wkv", w->head_dim, w->dim, store));
  DSV4_ASSIGN_OR_RETURN(w->kv_norm, LoadBf16Copy(ckpt, p + "kv_norm.weight", {w->head_dim}));
  DSV4_ASSIGN_OR_RETURN(w->wo_a, Bf16OrFp8Linear::Load(ckpt, p + "wo_a", w->n_groups * w->o_lora,
                                                       hd / w->n_groups, w->o_lora, store));
  DSV4_ASSIGN_OR_RETURN(w->wo_b,
                        Linear::Load(ckpt, p + "wo_b", w->dim, w->n_groups * w->o_lora, store));
  DSV4_ASSIGN_OR_RETURN(w->sink, LoadF32Copy(ckpt, p + "attn_sink", {w->n_heads}));
  w->freqs = LayerFrequencies(cfg, ratio);
  return w;
}

}  // namespace

Attention::Attention() = default;
Attention::~Attention() = default;

Result<std::unique_ptr<Attention>> Attention::Load(const checkpoint::Checkpoint& ckpt,
                                                   const checkpoint::ModelConfig& cfg,
                                                   int64_t layer_id, const std::string& prefix,
                                                   WeightStore& store) {
  DSV4_RETURN_IF_ERROR(CheckGeometry(cfg, layer_id, prefix));
  std::unique_ptr<Attention> a(new Attention());
  a->layer_id_ = layer_id;
  a->ratio_ = cfg.compress_ratio(layer_id);
  const std::string p = prefix + "attn.";
  DSV4_ASSIGN_OR_RETURN(a->w_, LoadWeights(ckpt, cfg, p, a->ratio_, store));
  if (a->ratio_ != 0) {
    CompressorSpec spec;
    spec.ratio = a->ratio_;
    spec.dim = cfg.hidden_size;
    spec.head_dim = cfg.head_dim;
    spec.rope_dim = cfg.qk_rope_head_dim;
    spec.rotate = false;
    spec.norm_eps = static_cast<float>(cfg.rms_norm_eps);
    DSV4_ASSIGN_OR_RETURN(a->compressor_,
                          Compressor::Load(ckpt, p + "compressor.", spec, a->w_->freqs.data()));
  }
  if (a->ratio_ == 4) {
    DSV4_ASSIGN_OR_RETURN(a->indexer_,
                          Indexer::Load(ckpt, cfg, p + "indexer.", a->w_->freqs.data(), store));
  }
  return a;
}

AttentionCacheGeometry Attention::CacheGeometry(int64_t ring_capacity) const {
  AttentionCacheGeometry g;
  g.head_dim = w_->head_dim;
  g.sliding_window = w_->window;
  g.ring_capacity = ring_capacity == 0 ? w_->window : ring_capacity;
  DSV4_CHECK_MSG(g.ring_capacity >= w_->window, "ring capacity {} < sliding window {}",
                 g.ring_capacity, w_->window);
  g.compress_ratio = ratio_;
  g.index_head_dim = w_->index_head_dim;
  return g;
}

std::unique_ptr<AttentionCache> Attention::NewCache(int64_t num_slots,
                                                    int64_t ring_capacity) const {
  return std::make_unique<AttentionCache>(CacheGeometry(ring_capacity), num_slots);
}

}  // namespace dsv4::model
