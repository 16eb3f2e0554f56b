// The DeepSeek-V4 attention sub-layer (docs/model.md "Attention paths" through
// "Operation order in one attention sub-layer"): sliding window (ratio 0), CSA
// (ratio 4: compressor + lightning indexer top-k) and HCA (ratio 128: all
// compressed rows), with the reference's rounding points.
//
// One general path serves every call shape: each sequence slice of a
// ForwardBatch continues its sequence from slice.start_pos with num_tokens >= 1
// rows (prefill chunk from any position, a decode token, S speculative rows),
// any number of sequences per call.  Every query's attention index list is a
// function of its position and the cache only (docs/model.md "Attention index
// layout"), so any chunking of a prompt is bitwise equal to one-shot prefill,
// an S-token call equals S single-token calls, and a sequence's output does not
// depend on the other sequences in the call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "model/attention_cache.h"
#include "model/forward_batch.h"
#include "model/weights.h"
#include "model/workspace.h"
#include "tensor/numeric.h"

namespace dsv4::model {

class Compressor;
class Indexer;
struct AttentionWeights;  // attention_weights.h (internal)

// Optional debug output of one Forward.
struct AttentionTrace {
  // CSA layers only (empty otherwise): [num_tokens, index_topk]; per row the
  // compressed-entry indices the indexer selected, sorted ascending, then -1
  // padding (the layout of golden `*.indexer_topk`).
  std::vector<int32_t> indexer_topk;
  int64_t topk_width = 0;
};

class Attention {
 public:
  // prefix: "layers.{L}." or "mtp.{k}."; layer_id indexes cfg.compress_ratios
  // (an MTP layer is num_hidden_layers + k).  Checks every tensor's dtype and
  // shape; errors name the tensor.  `store` receives the copies made at
  // load (FP8 panel copies: WeightStore::PackDeferred runs before Forward).
  static Result<std::unique_ptr<Attention>> Load(const checkpoint::Checkpoint& ckpt,
                                                 const checkpoint::ModelConfig& cfg,
                                                 int64_t layer_id, const std::string& prefix,
                                                 WeightStore& store);
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;

  // x [T, D]: the attention input (attn_norm output, BF16), T = batch.num_tokens(),
  // rows of each slice at [row_offset, row_offset + num_tokens) with positions
  // start_pos, start_pos+1, ...  out [T, D] BF16 (after wo_b); out may not alias x.
  // Reads and extends, for each slice, the state of slice.cache_slot in `cache`.
  // REQUIRES: cache made by this layer's NewCache; distinct cache_slot per
  // slice; cache.CanContinueAt(slot, start_pos), i.e. NumCachedTokens(slot) -
  // (ring_capacity - sliding_window) <= start_pos <= NumCachedTokens(slot).  A
  // start_pos below NumCachedTokens re-runs those positions (after rejected
  // speculative tokens): everything the dropped positions produced is
  // discarded first, so the result equals never having run them.
  // Uses the Workspace slots kAttn*, kIx*, kCmp* and kLin*; x and out must
  // not live in `ws` in those slots.
  void Forward(const bf16* x, const ForwardBatch& batch, AttentionCache& cache, bf16* out,
               Workspace& ws, ThreadPool* pool, AttentionTrace* trace = nullptr) const;

  // A cache for num_slots sequences, all fresh.  ring_capacity 0 means
  // sliding_window; otherwise it must be >= sliding_window, and the excess is
  // the number of positions a slot can re-run (on every layer kind).
  std::unique_ptr<AttentionCache> NewCache(int64_t num_slots, int64_t ring_capacity = 0) const;
  // The geometry NewCache uses (self-managed pages).
  AttentionCacheGeometry CacheGeometry(int64_t ring_capacity = 0) const;

  int64_t layer_id() const { return layer_id_; }
  int64_t compress_ratio() const { return ratio_; }

 private:
  Attention();

  int64_t layer_id_ = 0;
  int64_t ratio_ = 0;
  std::unique_ptr<AttentionWeights> w_;
  std::unique_ptr<Compressor> compressor_;  // ratio 4 / 128
  std::unique_ptr<Indexer> indexer_;        // ratio 4
};

}  // namespace dsv4::model
