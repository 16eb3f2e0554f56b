// The lightning indexer of CSA layers (docs/model.md "Lightning indexer"; op
// goldens: tests/data/golden/ops/README.md §15): picks, per query, up to
// index_topk compressed entries among those visible to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "model/attention_cache.h"
#include "model/compressor.h"
#include "model/forward_batch.h"
#include "model/linear.h"
#include "model/workspace.h"
#include "tensor/numeric.h"

namespace dsv4::model {

class Indexer {
 public:
  // prefix e.g. "layers.2.attn.indexer."; rope_freqs [qk_rope_head_dim/2] is
  // the attention layer's (compressed-profile) table; `store` receives wq_b's
  // FP8 panel copy (Linear::Load).
  static Result<std::unique_ptr<Indexer>> Load(const checkpoint::Checkpoint& ckpt,
                                               const checkpoint::ModelConfig& cfg,
                                               const std::string& prefix, const float* rope_freqs,
                                               WeightStore& store);

  int64_t topk() const { return topk_; }
  int64_t n_heads() const { return n_heads_; }
  int64_t head_dim() const { return head_dim_; }
  const Compressor& compressor() const { return *compressor_; }

  // x [T, D] attention input, qr [T, q_lora_rank] (q_norm output).  First
  // extends every slice's indexer keys (the indexer compressor, before scoring,
  // so a key completed by a row is scorable by it), then writes for each row at
  // position p its selection topk_out [T, topk()]: the k = min(topk, (p+1)/4)
  // visible entries (t < (p+1)/4) of highest score, descending score, ties by
  // ascending t, then -1 padding.
  void Forward(const bf16* x, const bf16* qr, const ForwardBatch& batch, AttentionCache& cache,
               int32_t* topk_out, Workspace& ws, ThreadPool* pool) const;

 private:
  Indexer() = default;
  void Queries(const bf16* qr, const ForwardBatch& batch, bf16* q, Workspace& ws,
               ThreadPool* pool) const;
  void UpdateKeys(const bf16* x, const ForwardBatch& batch, AttentionCache& cache, Workspace& ws,
                  ThreadPool* pool) const;
  void Select(const SequenceSlice& s, const bf16* q, const bf16* w, const AttentionCache& cache,
              int32_t* topk_out, Workspace& ws, ThreadPool* pool) const;

  int64_t n_heads_ = 0;
  int64_t head_dim_ = 0;
  int64_t rope_dim_ = 0;
  int64_t topk_ = 0;
  int64_t ratio_ = 4;
  float weight_scale_ = 0;   // fp32(head_dim^-0.5 * n_heads^-0.5), computed in double
  Linear wq_b_;              // [n_heads*head_dim, q_lora_rank] FP8 or INT8
  Bf16Linear weights_proj_;  // [n_heads, D]
  std::unique_ptr<Compressor> compressor_;
  std::vector<float> freqs_;
};

}  // namespace dsv4::model
