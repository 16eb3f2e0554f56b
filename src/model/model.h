// The DeepSeek-V4 model: embedding, 4 mHC residual streams, the main blocks,
// hc_head + RMSNorm + FP32 LM head on requested rows (docs/model.md "Top level
// and final head"), and the MTP block ("MTP block and alignment").  See
// docs/model.md "Forward pass API".
//
// Everything outside attention is per token, and attention's outputs for a
// sequence depend only on that sequence's positions and cache, so a row's
// results are bitwise independent of how the batch is composed or chunked.
//
// Immutable after Load: one Model serves concurrent forwards, each with its
// own Workspace and ModelCache.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "checkpoint/prepacked.h"
#include "model/block.h"
#include "model/expert_usage.h"
#include "model/forward_batch.h"
#include "model/linear.h"
#include "model/mhc.h"
#include "model/model_cache.h"
#include "model/weights.h"
#include "model/workspace.h"
#include "tensor/numeric.h"

namespace dsv4::model {

struct ModelOptions {
  bool load_mtp = true;  // bind mtp.{0}.* (ignored when the config has no MTP layer)
  // The prepacked sidecar (docs/prepack.md): "auto" uses
  // <dir>/dsv4-stacked-r{ranks}.safetensors when it exists, is hot and
  // matches the checkpoint, else repacks from the checkpoint (logging why);
  // "off" never looks; any other value is a sidecar path, used the same way
  // as "auto" except that a missing file is an error.
  std::string prepacked = "auto";
  int64_t ranks = 1;  // expert-parallel ranks of the engine (one process today)
  // Sampled page-cache residency a sidecar needs (below: "cold", fall back).
  double prepacked_min_residency = 0.95;
  // Threads verifying the sidecar's data checksum at load (0 = every CPU).
  int prepacked_verify_threads = 0;
  // Threads copying the FP4 weights into the kernels' panel layout at load
  // (0 = every CPU).
  int load_threads = 0;
  // Expert parallelism (docs/scale-out.md): with a communicator of N > 1
  // ranks this process runs only its block of E/N routed experts in every
  // MoE layer (the MTP block's too) and exchanges routed outputs with the
  // other ranks, which must run the same forwards.  Null: every expert here.
  dist::Communicator* expert_parallel = nullptr;
  // With expert_parallel: every rank forwards only its own DP partition's
  // rows (DP attention across ranks, docs/scale-out.md); the MoE layers
  // exchange every rank's tokens, and every rank ends each step with
  // FinishDataParallelStep.  False: every rank forwards the same rows.
  bool data_parallel = false;
};

// What Load decided about the sidecar.
struct PrepackedReport {
  checkpoint::PrepackedOutcome outcome = checkpoint::PrepackedOutcome::kDisabled;
  std::string path;
  std::string reason;     // why it was not used; empty when used
  double residency = -1;  // sampled page-cache residency; -1 if not sampled
};

struct CacheOptions {
  // Ring rows (window KV and compressor token states) per main layer; 0 =
  // sliding_window.  A larger ring lets every layer re-run its last
  // (ring - window) positions, e.g. after rejected speculative tokens.
  int64_t ring_capacity = 0;
  int64_t mtp_ring_capacity = 0;
  bool include_mtp = true;  // a cache for the MTP block (when the model has one)
};

// External page pools for the full-history row lists (kPooledGroups): every
// layer of a group gets a fixed pool of num_pages[group] pages of page_tokens
// source positions, and the caller addresses rows through per-slice page
// tables (SlicePages).  Entries of the other groups are ignored.
struct CachePools {
  int64_t page_tokens = 0;                                 // --block-size
  std::array<int64_t, cache::kNumDsv4Groups> num_pages{};  // per group, all DP partitions
};

// The cache as this model stores it, for the engine's planner, scheduler and
// executor (Model::DeclareCache): the seven groups with their geometry, and
// their bytes computed by the same functions that size the storage, so the
// plan prices exactly what NewCache allocates.  Pooled groups: bytes of one
// page summed over every layer that has the group.  Ring groups (window KV,
// compressor states) live in per-slot storage: page_bytes 0 (their pages are
// admission bookkeeping) and their bytes are in slot_bytes.
struct CacheDeclaration {
  std::vector<cache::CacheGroupSpec> groups;  // indexed by cache::Dsv4Group
  int64_t slot_bytes = 0;                     // per-slot storage of every layer (and the MTP block)
  int64_t page_tokens = 0;
};

// Caller-owned outputs of one forward; every pointer is optional.
struct ForwardOutputs {
  float* logits = nullptr;  // [logit_rows.size(), vocab] FP32
  bf16* hidden = nullptr;   // [logit_rows.size(), D] the head input: norm(hc_head(streams))
  bf16* streams = nullptr;  // [num_tokens, hc, D]: main model: after the last block, before
                            // hc_head (the MTP input h); MTP: after the MTP block
  // ForwardMtp only: logits from the head computed with BF16 dot products
  // (kernels::GemmBf16F32Approx, ~1.6x faster on CPUs with AVX512-BF16;
  // rounding differs from the reference head).  For draft tokens, which the
  // main model verifies, so their bits never reach an output.  Forward
  // refuses it (its logits are the target).
  bool approx_logits = false;
  // An observer, not an output of the computation: the routed experts every
  // MoE layer selected for the batch's rows are marked in it (layer ids as
  // Block::layer_id; size it cfg.num_layers_with_mtp() to also cover
  // ForwardMtp).  Nothing is cleared: the caller clears between forwards.
  ExpertUsage* expert_usage = nullptr;
};

// Optional debug output of Forward.
struct ModelTrace {
  bool capture_streams = false;
  std::vector<std::vector<bf16>> layer_streams;  // [layer] -> [num_tokens, hc, D] after block
  std::vector<BlockTrace> blocks;                // [layer]
};

class Model {
 public:
  // Opens <dir>/config.json and the checkpoint.
  static Result<std::unique_ptr<Model>> Load(const std::string& dir,
                                             const ModelOptions& options = {});
  static Result<std::unique_ptr<Model>> Load(std::unique_ptr<checkpoint::Checkpoint> ckpt,
                                             checkpoint::ModelConfig cfg,
                                             const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const checkpoint::ModelConfig& config() const { return cfg_; }
  const checkpoint::Checkpoint& checkpoint() const { return *ckpt_; }
  const PrepackedReport& prepacked() const { return prepacked_; }
  // What the MoE layers exchanged under ModelOptions::expert_parallel (all
  // zero without it); the forward adds to it.
  const ExpertExchangeStats& expert_exchange_stats() const { return *expert_stats_; }
  // Bytes of mapped files the forward pass reads: the sidecar plus the
  // checkpoint tensors it does not cover when one is used, else the shards
  // (what the engine reserves in the page cache).
  // Under expert parallelism the other ranks' routed experts are unmapped
  // (docs/scale-out.md "Memory"), so this is the rank's own share.
  int64_t MappedWeightBytes() const;
  // Bytes of the routed experts this process binds, every MoE layer (all of
  // them without expert parallelism).
  int64_t RoutedExpertBytes() const;
  bool has_mtp() const { return mtp_block_ != nullptr; }
  int64_t num_layers() const { return cfg_.num_hidden_layers; }
  int64_t stream_width() const { return cfg_.hc_mult * cfg_.hidden_size; }  // per token

  // A self-managed cache: the growing lists allocate their pages on demand.
  std::unique_ptr<ModelCache> NewCache(int64_t num_slots, const CacheOptions& options = {}) const;
  // A cache with external pages (engine mode): fixed, lazily backed pools,
  // rows addressed through each forward's SlicePages.  InvalidArgument when
  // page_tokens is not a positive multiple of every compress ratio or the MTP
  // block has compressed rows (no cache group plans pages for them).
  Result<std::unique_ptr<ModelCache>> NewCache(int64_t num_slots, const CacheOptions& options,
                                               const CachePools& pools) const;
  // Bytes NewCache(options) allocates per slot independent of context: rings
  // and compressor states of every layer (and the MTP block when included).
  size_t CacheFixedBytesPerSlot(const CacheOptions& options) const;
  // The cache NewCache(options, pools with page_tokens) builds, as the
  // engine's cache groups.  InvalidArgument for a page size the model cannot
  // page (not a positive multiple of every compress ratio) or an MTP block
  // with compressed rows.
  Result<CacheDeclaration> DeclareCache(const CacheOptions& options, int64_t page_tokens) const;

  // Main model on any mix of sequences (ForwardBatch).  Writes the requested
  // outputs; extends each slice's cache slot.  Errors (InvalidArgument /
  // FailedPrecondition) for a malformed batch, an id >= vocab, or a slice whose
  // start_pos the cache cannot serve; the cache is untouched then.
  Status Forward(const ForwardBatch& batch, ModelCache& cache, const ForwardOutputs& out,
                 Workspace& ws, ThreadPool* pool, ModelTrace* trace = nullptr) const;

  // The MTP block (docs/model.md "MTP block and alignment").  Row r of batch
  // is (token_{q+1} at position q) and h [num_tokens, hc, D] holds the main
  // model's pre-head streams of position q (ForwardOutputs::streams).  Uses
  // and extends the MTP cache (window ring only).  Logits use the MTP's own
  // hc_head/norm and the shared head.  REQUIRES has_mtp() (else
  // FailedPrecondition).
  Status ForwardMtp(const ForwardBatch& batch, const bf16* h, ModelCache& cache,
                    const ForwardOutputs& out, Workspace& ws, ThreadPool* pool,
                    BlockTrace* trace = nullptr) const;

  // Data-parallel MoE across ranks (ModelOptions::data_parallel): called once
  // by every rank after each step's forwards (main model and MTP), it joins
  // the MoE exchanges that other ranks still run until every rank has
  // arrived.  No-op otherwise.
  void FinishDataParallelStep(Workspace& ws, ThreadPool* pool) const;
  bool data_parallel() const { return !moe_layers_.empty(); }

  // One block on given input streams (layer-by-layer debugging, isolated-block
  // golden tests): layer_id in [0, num_layers()] (num_layers() = the MTP
  // block), in/out [num_tokens, hc, D], using cache.layer(layer_id).
  Status RunBlock(int64_t layer_id, const bf16* in, const ForwardBatch& batch, ModelCache& cache,
                  bf16* out, Workspace& ws, ThreadPool* pool, BlockTrace* trace = nullptr) const;

  // Block-0 input: embed[ids] copied into all hc streams.  streams [n, hc, D].
  void EmbedStreams(const int32_t* ids, int64_t n, bf16* streams) const;

 private:
  struct HeadWeights {
    HcWeights hc_head;
    const bf16* norm = nullptr;  // [D]
  };
  struct MtpWeights {
    Linear e_proj;  // FP8 or INT8
    Linear h_proj;
    const bf16* enorm = nullptr;  // [D]
    const bf16* hnorm = nullptr;  // [D]
    HeadWeights head;
  };

  Model() = default;
  // Decides about the sidecar and installs it as the checkpoint's overlay.
  Status AttachPrepacked(const ModelOptions& options);
  Status Bind(const ModelOptions& options);
  // The rank count a sidecar is looked up for: the expert-parallel ranks,
  // else options.ranks.
  static int64_t ExpertRanks(const ModelOptions& options);
  // Expert parallelism: unmaps the routed experts this rank never reads
  // (Checkpoint::UnmapRoutedExpertsOutside) and logs what stays mapped.
  void UnmapOtherRanksExperts(const ModelOptions& options);
  // Checks the batch against layers [first_layer, end_layer) of the cache
  // (slots, positions, ids, pages); nothing is changed.
  Status ValidateBatch(const ForwardBatch& batch, const ModelCache& cache, int64_t first_layer,
                       int64_t end_layer) const;
  // ValidateBatch, then the slices' pages go into layers [first, end).
  Status PrepareBatch(const ForwardBatch& batch, ModelCache& cache, int64_t first_layer,
                      int64_t end_layer) const;
  std::vector<AttentionCacheGeometry> CacheGeometries(const CacheOptions& options) const;
  // hc_head -> norm -> head on the batch's logit rows of streams [T, hc, D].
  void Head(const HeadWeights& hw, const bf16* streams, const ForwardBatch& batch,
            const ForwardOutputs& out, Workspace& ws, ThreadPool* pool) const;

  checkpoint::ModelConfig cfg_;
  std::unique_ptr<checkpoint::Checkpoint> ckpt_;
  int64_t expert_first_ = 0;  // the routed experts this process binds
  int64_t expert_last_ = 0;
  PrepackedReport prepacked_;
  WeightStore store_;
  HcShape hc_;
  const bf16* embed_ = nullptr;  // [vocab, D]
  Bf16Linear head_;              // [vocab, D], used as FP32
  HeadWeights main_head_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<Block> mtp_block_;
  MtpWeights mtp_;
  // Data-parallel MoE: every MoE layer by its shard's layer tag (the main
  // layers, then the MTP block's); empty without ModelOptions::data_parallel.
  std::vector<MoeLayerRef> moe_layers_;
  // Behind a pointer: the const forward counts into it (one thread at a time).
  std::unique_ptr<ExpertExchangeStats> expert_stats_ = std::make_unique<ExpertExchangeStats>();
};

}  // namespace dsv4::model
