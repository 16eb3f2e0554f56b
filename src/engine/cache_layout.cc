#include "engine/cache_layout.h"

#include <fmt/format.h>

#include "base/logging.h"

namespace dsv4::engine {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The reference's in-flight margin (2 x 128 tokens, docs/engine.md "Bytes per
// slot, Flash").
constexpr int64_t kReferenceRingMargin = 256;

}  // namespace

Dsv4CacheShapes Dsv4CacheShapes::Flash() {
  Dsv4CacheShapes s;
  s.num_layers = 43;
  s.num_csa_layers = 21;
  s.num_hca_layers = 20;
  s.num_mtp_layers = 1;
  s.head_dim = 512;
  s.index_head_dim = 128;
  s.window = 128;
  s.csa_ratio = 4;
  s.hca_ratio = 128;
  return s;
}

CacheStorage CacheStorage::Bf16(const Dsv4CacheShapes& s) {
  return {2LL * s.head_dim, 2LL * s.index_head_dim, 4};
}

CacheStorage CacheStorage::ReferenceW8A8(const Dsv4CacheShapes& s) {
  return {2LL * s.head_dim, s.index_head_dim + 4LL, 4};
}

CacheStorage CacheStorage::Fp8(const Dsv4CacheShapes& s) {
  // 64 rope dims stay BF16; the rest is FP8 with one UE8M0 scale per 64
  // values, padded to 8 scale bytes.
  const int64_t rope = 64;
  const int64_t nope = s.head_dim - rope;
  return {nope + 2 * rope + 8, s.index_head_dim + 4LL, 4};
}

cache::Dsv4CacheGeometry GeometryFor(const Dsv4CacheShapes& shapes, int32_t block_size,
                                     StatePageTokens state_pages) {
  cache::Dsv4CacheGeometry g;
  g.block_size = block_size;
  g.window = shapes.window;
  g.csa_ratio = shapes.csa_ratio;
  g.hca_ratio = shapes.hca_ratio;
  g.csa_state_page_tokens = state_pages.csa;
  g.hca_state_page_tokens = state_pages.hca;
  g.mtp_in_ori = shapes.num_mtp_layers > 0;
  return g;
}

Result<std::vector<cache::CacheGroupSpec>> BuildDsv4CacheGroups(const Dsv4CacheShapes& s,
                                                                const CacheStorage& st,
                                                                int32_t block_size,
                                                                StatePageTokens state_pages) {
  DSV4_ASSIGN_OR_RETURN(std::vector<cache::CacheGroupSpec> groups,
                        cache::MakeDsv4CacheGroups(GeometryFor(s, block_size, state_pages)));
  const int64_t b = block_size;
  const int64_t d = s.head_dim;
  const int64_t di = s.index_head_dim;
  const int64_t e = st.state_elem_bytes;
  groups[cache::kGroupOri].page_bytes = (s.num_layers + s.num_mtp_layers) * b * st.kv_row_bytes;
  groups[cache::kGroupCmpC128].page_bytes =
      s.num_hca_layers * groups[cache::kGroupCmpC128].rows_per_page() * st.kv_row_bytes;
  groups[cache::kGroupCmpC4].page_bytes =
      s.num_csa_layers * groups[cache::kGroupCmpC4].rows_per_page() * st.kv_row_bytes;
  groups[cache::kGroupIdx].page_bytes =
      s.num_csa_layers * groups[cache::kGroupIdx].rows_per_page() * st.index_row_bytes;
  // State rows are [kv | score]; the CSA compressors overlap two blocks, which
  // doubles both halves.
  groups[cache::kGroupHcaState].page_bytes = s.num_hca_layers * state_pages.hca * (2 * d) * e;
  groups[cache::kGroupCsaState].page_bytes = s.num_csa_layers * state_pages.csa * (2 * 2 * d) * e;
  groups[cache::kGroupCsaInnerState].page_bytes =
      s.num_csa_layers * state_pages.csa * (2 * 2 * di) * e;
  return groups;
}

Result<SlotComparison> CompareBytesPerSlot(const Dsv4CacheShapes& shapes,
                                           const CacheStorage& storage, int64_t max_model_len,
                                           int64_t max_step_tokens, int64_t num_spec,
                                           int64_t prefill_tile) {
  const int32_t block = 128;
  DSV4_ASSIGN_OR_RETURN(std::vector<cache::CacheGroupSpec> groups,
                        BuildDsv4CacheGroups(shapes, storage, block));
  const std::vector<int64_t> reference_depth = {
      CeilDiv(shapes.window - 1 + kReferenceRingMargin, block) + 1,
      CeilDiv(max_model_len, block),
      CeilDiv(max_model_len, block),
      CeilDiv(max_model_len, block),
      CeilDiv(shapes.hca_ratio + kReferenceRingMargin, 8),
      CeilDiv(shapes.csa_ratio + kReferenceRingMargin, 4),
      CeilDiv(shapes.csa_ratio + kReferenceRingMargin, 4),
  };
  SlotComparison c;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t peak = cache::PeakPagesPerRequest(groups[g], max_model_len, max_step_tokens,
                                                    num_spec, prefill_tile);
    c.group_names.push_back(groups[g].name);
    c.ours.push_back(peak * groups[g].page_bytes);
    c.reference.push_back(reference_depth[g] * groups[g].page_bytes);
    c.ours_total += c.ours.back();
    c.reference_total += c.reference.back();
  }
  return c;
}

std::string DescribeSlotComparison(const SlotComparison& c) {
  std::string s =
      fmt::format("bytes per slot: ours {} ({:.1f} MiB), reference {} ({:.1f} MiB);", c.ours_total,
                  c.ours_total / 1048576.0, c.reference_total, c.reference_total / 1048576.0);
  for (size_t g = 0; g < c.group_names.size(); ++g) {
    s += fmt::format(" {} {}/{}", c.group_names[g], c.ours[g], c.reference[g]);
  }
  return s;
}

Result<CacheSetup> CreateDsv4Cache(const CacheSetupOptions& o) {
  DSV4_ASSIGN_OR_RETURN(std::vector<cache::CacheGroupSpec> groups,
                        BuildDsv4CacheGroups(o.shapes, o.storage, o.block_size, o.state_pages));
  if (o.slot_ring_bytes > 0) {
    for (cache::CacheGroupSpec& g : groups) {
      if (g.is_ring()) g.page_bytes = 0;
    }
  }
  return CreateCache(std::move(groups), o);
}

Result<CacheSetup> CreateCache(std::vector<cache::CacheGroupSpec> groups,
                               const CachePlanOptions& o) {
  if (o.num_partitions <= 0)
    return InvalidArgument("--dp must be positive, got {}", o.num_partitions);
  cache::CapacityOptions capacity;
  capacity.budget_bytes = o.budget_bytes / o.num_partitions;
  capacity.max_model_len = o.max_model_len;
  capacity.max_step_tokens = o.max_step_tokens;
  capacity.num_spec = o.num_spec;
  capacity.prefill_align = o.prefill_tile;
  capacity.max_seqs = CeilDiv(o.max_num_seqs, o.num_partitions);
  capacity.slot_ring_bytes = o.slot_ring_bytes;
  capacity.snapshots_per_slot = o.snapshots_per_slot;
  DSV4_ASSIGN_OR_RETURN(cache::CapacityPlan plan, cache::PlanCapacity(groups, capacity));
  std::string description = fmt::format("{} partition(s); {}", o.num_partitions,
                                        cache::DescribeCapacity(groups, capacity, plan));
  DSV4_ASSIGN_OR_RETURN(cache::CacheManager cache,
                        cache::CacheManager::Create(groups, o.num_partitions, plan.num_pages));
  DSV4_LOG_INFO("{}", description);
  return CacheSetup{std::move(cache), std::move(plan), std::move(description)};
}

}  // namespace dsv4::engine
