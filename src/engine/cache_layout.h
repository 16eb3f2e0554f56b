// Bytes of the DeepSeek-V4 cache groups, from model shapes (the engine side of
// capacity planning: cache/ counts pages, this file prices them).
//
// The runner fills Dsv4CacheShapes from ModelConfig (engine/ does not depend
// on the model or checkpoint layers) and chooses a CacheStorage matching the
// row formats its device pools use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/cache_manager.h"
#include "cache/cache_spec.h"
#include "cache/capacity.h"

namespace dsv4::engine {

struct Dsv4CacheShapes {
  int32_t num_layers = 0;      // main layers (every one has a window in `ori`)
  int32_t num_csa_layers = 0;  // compress ratio csa_ratio
  int32_t num_hca_layers = 0;  // compress ratio hca_ratio
  int32_t num_mtp_layers = 0;  // MTP layers; their window shares `ori` page ids
  int32_t head_dim = 0;        // KV row width (nope + rope)
  int32_t index_head_dim = 0;  // indexer key width
  int32_t window = 0;
  int32_t csa_ratio = 4;
  int32_t hca_ratio = 128;

  // DeepSeek-V4-Flash: 43 layers (21 CSA, 20 HCA, 2 SWA), 1 MTP layer,
  // head_dim 512, index_head_dim 128, window 128.
  static Dsv4CacheShapes Flash();
};

// Bytes of one stored row per group kind.
struct CacheStorage {
  int64_t kv_row_bytes = 0;      // raw window and compressed KV rows
  int64_t index_row_bytes = 0;   // indexer keys
  int64_t state_elem_bytes = 4;  // compressor state [kv | score] elements (FP32)

  // BF16 KV rows and indexer keys (the official reference's cache dtype).
  static CacheStorage Bf16(const Dsv4CacheShapes& shapes);
  // PyPTO's W8A8 deployment: BF16 KV, INT8 indexer keys + one FP32 scale.
  static CacheStorage ReferenceW8A8(const Dsv4CacheShapes& shapes);
  // vLLM's fp8_ds_mla rows (448 FP8 + 64 BF16 rope dims + 8 scale bytes =
  // 584 B for head_dim 512) and FP8 keys + FP32 scale: lossless w.r.t. the
  // reference's QAT.
  static CacheStorage Fp8(const Dsv4CacheShapes& shapes);
};

// Token slots per compressor-state page (4 and 8 in the reference's build).
struct StatePageTokens {
  int32_t csa = 4;
  int32_t hca = 8;
};

cache::Dsv4CacheGeometry GeometryFor(const Dsv4CacheShapes& shapes, int32_t block_size,
                                     StatePageTokens state_pages = {});

// The seven groups with page_bytes = layers * rows per page * row bytes.
Result<std::vector<cache::CacheGroupSpec>> BuildDsv4CacheGroups(const Dsv4CacheShapes& shapes,
                                                                const CacheStorage& storage,
                                                                int32_t block_size,
                                                                StatePageTokens state_pages = {});

// Bytes one max-length request costs, per group, ours against the reference's
// fixed slot (its ring depths: ori ceil((window - 1 + 256) / block) + 1,
// hca_state ceil((hca_ratio + 256) / 8), csa states ceil((csa_ratio + 256) / 4),
// full-history groups ceil(max_model_len / block); docs/engine.md "Bytes per
// slot, Flash").
struct SlotComparison {
  std::vector<std::string> group_names;
  std::vector<int64_t> ours;       // [num_groups] bytes
  std::vector<int64_t> reference;  // [num_groups] bytes
  int64_t ours_total = 0;
  int64_t reference_total = 0;
};
Result<SlotComparison> CompareBytesPerSlot(const Dsv4CacheShapes& shapes,
                                           const CacheStorage& storage, int64_t max_model_len,
                                           int64_t max_step_tokens, int64_t num_spec,
                                           int64_t prefill_tile = 128);
std::string DescribeSlotComparison(const SlotComparison& c);

// How to size the pools of given groups.
struct CachePlanOptions {
  int64_t budget_bytes = 0;    // all partitions together (ResolveKvBudget)
  int32_t num_partitions = 1;  // --dp
  int64_t max_model_len = 0;
  int64_t max_step_tokens = 0;  // SchedulerConfig::PrefillExtent()
  int64_t num_spec = 0;         // K
  int64_t prefill_tile = 128;   // SchedulerConfig::prefill_tile (chunk start alignment)
  int64_t max_num_seqs = 0;     // rings are sized for ceil(max_num_seqs / dp) per partition
  // > 0: the runner keeps rings and compressor states in per-slot storage of
  // this many bytes (CapacityOptions::slot_ring_bytes); the ring groups' pages
  // are then admission bookkeeping priced at 0 bytes.
  int64_t slot_ring_bytes = 0;
  // Prefix caching: snapshot buffers (slot_ring_bytes each) per runner slot
  // (CapacityOptions::snapshots_per_slot).
  int64_t snapshots_per_slot = 0;
};

// CreateDsv4Cache's input: groups priced from shapes and a row format (what-if
// planning and scheduler tests; the engine prices from the model's own
// declaration, Model::DeclareCache, and calls CreateCache).
struct CacheSetupOptions : CachePlanOptions {
  Dsv4CacheShapes shapes;
  CacheStorage storage;
  int32_t block_size = 128;  // --block-size
  StatePageTokens state_pages;
};

struct CacheSetup {
  cache::CacheManager cache;
  cache::CapacityPlan plan;
  std::string description;  // the startup log line
};

// Plans the pools of `groups` (their page_bytes set) for budget / dp bytes per
// partition, creates the cache manager and logs the capacity.
Result<CacheSetup> CreateCache(std::vector<cache::CacheGroupSpec> groups,
                               const CachePlanOptions& options);

// Prices the DeepSeek-V4 groups from options.shapes and options.storage (ring
// groups at 0 bytes when options.slot_ring_bytes > 0), then CreateCache.
Result<CacheSetup> CreateDsv4Cache(const CacheSetupOptions& options);

}  // namespace dsv4::engine
