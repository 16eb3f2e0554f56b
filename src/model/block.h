// One DeepSeek-V4 block (docs/model.md "Block and mHC"): mHC around the attention sub-layer
// and around the MoE sub-layer, on 4 BF16 residual streams.
//
//   a, post, C = hc_pre(x, hc_attn);  x = hc_post(Attn(RMSNorm(a, attn_norm)), x, post, C)
//   a, post, C = hc_pre(x, hc_ffn);   x = hc_post(MoE(RMSNorm(a, ffn_norm), ids), x, post, C)
//
// The same class serves main layers (prefix "layers.{L}.") and the MTP block
// (prefix "mtp.{k}.", layer id num_hidden_layers + k).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "model/attention.h"
#include "model/expert_usage.h"
#include "model/forward_batch.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/weights.h"
#include "model/workspace.h"

namespace dsv4::model {

// Optional debug output of one block call.
struct BlockTrace {
  AttentionTrace attn;
  std::vector<int32_t> expert_ids;  // [num_tokens, top_k], each row ascending
  int64_t top_k = 0;
};

class Block {
 public:
  // Binds every tensor under `prefix` (of the routed experts only `experts`,
  // moe.h); copies small FP32 tensors into store.
  static Result<std::unique_ptr<Block>> Load(const checkpoint::Checkpoint& ckpt,
                                             const checkpoint::ModelConfig& cfg, int64_t layer_id,
                                             const std::string& prefix, WeightStore& store,
                                             ExpertRange experts = {});
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // in, out [T, hc, D] BF16 streams, T = batch.num_tokens(); out must not alias
  // in.  Hash-routed layers route by batch.token_ids.  Cache contract as
  // Attention::Forward.  Workspace slots kBlk* plus those of its parts.
  // usage, if non-null, gets the routed experts of this block's MoE marked in
  // its layer(layer_id()).
  void Forward(const bf16* in, const ForwardBatch& batch, AttentionCache& cache, bf16* out,
               Workspace& ws, ThreadPool* pool, BlockTrace* trace = nullptr,
               ExpertUsage* usage = nullptr) const;

  int64_t layer_id() const { return layer_id_; }
  const Attention& attention() const { return *attn_; }
  const MoeShape& moe_shape() const { return moe_shape_; }
  // Expert parallelism: which routed experts this process runs (moe_shard.h).
  void set_expert_shard(const ExpertShard& shard) { moe_.shard = shard; }
  // The MoE layer as the data-parallel exchanges see it (moe_shard.h).
  MoeLayerRef moe_layer() const { return {&moe_shape_, &moe_}; }

 private:
  Block() = default;

  int64_t layer_id_ = 0;
  HcShape hc_;
  MoeShape moe_shape_;
  float norm_eps_ = 1e-6f;
  std::unique_ptr<Attention> attn_;
  HcWeights hc_attn_;
  HcWeights hc_ffn_;
  const bf16* attn_norm_ = nullptr;  // [D]
  const bf16* ffn_norm_ = nullptr;   // [D]
  MoeWeights moe_;
};

}  // namespace dsv4::model
