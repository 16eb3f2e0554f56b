// Geometry of the cache groups, in source tokens and pages (integers only:
// cache/ never sees a tensor or a model config).
//
// A group stores one kind of per-token (or per-compressed-block) state for all
// layers that have it; a page of a group covers `tokens_per_page` consecutive
// source positions of one request.  Two kinds of group exist:
//   - full history (compressed KV, indexer keys): every page from position 0
//     on stays with its request;
//   - ring (window KV, compressor states): only the recent positions a later
//     step can read stay live, so older pages go back to the free list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::cache {

enum class GroupKind : uint8_t { kRing, kFullHistory };

// The positions one step computes for one request: [start, end), where start
// equals the request's computed-token count and the last `num_spec` positions
// are speculative (draft rows that verification may reject).
struct StepSpan {
  int64_t start = 0;
  int64_t end = 0;
  int64_t num_spec = 0;
};

// Logical pages [begin, end) of one request in one group.
struct PageRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool empty() const { return end <= begin; }
  int64_t size() const { return empty() ? 0 : end - begin; }
};

struct CacheGroupSpec {
  std::string name;
  GroupKind kind = GroupKind::kFullHistory;
  int32_t tokens_per_page = 128;  // source positions one page covers
  // Source positions per stored row: 1 for per-token groups (window KV,
  // compressor state), the compress ratio for compressed KV and indexer keys
  // (a page then holds tokens_per_page / tokens_per_row rows).
  int32_t tokens_per_row = 1;
  // Ring only.  After `c` positions are computed, a later step reads positions
  // [LiveFrom(c), c) with LiveFrom(c) = max(0, AlignDown(c, align) - lookback):
  // a window of w tokens (plus the MTP layer's shifted row) is align 1,
  // lookback w - 1 (+1); a compressor of ratio r keeps the open block
  // (align r) plus `overlap` earlier blocks (lookback overlap * r).
  int32_t align = 1;
  int32_t lookback = 0;
  // Bytes of one page summed over all layers of the group; set by the engine
  // from model shapes (cache/ does not know them).  Only capacity planning
  // reads it.
  int64_t page_bytes = 0;

  bool is_ring() const { return kind == GroupKind::kRing; }
  // First position a later step may read once `num_computed` positions exist.
  int64_t LiveFrom(int64_t num_computed) const;
  // Logical page holding position `pos`.
  int64_t PageOf(int64_t pos) const { return pos / tokens_per_page; }
  int32_t rows_per_page() const { return tokens_per_page / tokens_per_row; }
  // Pages covering positions [begin, end).
  PageRange PagesOf(int64_t begin, int64_t end) const;
  // Pages a request must hold while it has `num_computed` positions and no
  // step in flight: positions [LiveFrom(c), c) for rings, [0, c) otherwise.
  PageRange LivePages(int64_t num_computed) const;
  // Pages a step must have mapped: what it reads from earlier steps plus what
  // it writes that a later step may read.  For a ring and a long step these
  // are two disjoint ranges: positions in between are computed from the step's
  // own activations and are never stored (their slot mapping is -1), which is
  // what keeps a long prefill chunk from needing pages for its whole extent.
  // Returns 1 or 2 non-empty ranges in ascending order (0 for an empty span).
  std::vector<PageRange> RequiredPages(const StepSpan& span) const;
};

Status ValidateGroupSpec(const CacheGroupSpec& spec);

struct BlockTable;
// Pool row that holds position `pos` of the owner of `table` (for compressed
// groups: the row of the block containing pos), or -1 where the table has no
// page (a ring's hole or a released page): the slot mapping a runner passes
// to the kernels, -1 meaning "do not store".
int64_t RowOf(const CacheGroupSpec& spec, const BlockTable& table, int64_t pos);

// DeepSeek-V4 model dims that shape the groups (the caller builds this from
// ModelConfig and the --block-size flag).
struct Dsv4CacheGeometry {
  int32_t block_size = 128;           // source tokens per ori / cmp / idx page
  int32_t window = 128;               // sliding window of every attention layer
  int32_t csa_ratio = 4;              // compress ratio of CSA layers (overlapping)
  int32_t hca_ratio = 128;            // compress ratio of HCA layers
  int32_t csa_state_page_tokens = 4;  // token slots per csa_state / csa_inner_state page
  int32_t hca_state_page_tokens = 8;  // token slots per hca_state page
  // The MTP layer keeps its window in `ori` with rows shifted by one token, so
  // its pending row at position c - 1 attends back to c - 1 - (window - 1).
  bool mtp_in_ori = true;
};

// Group indices, in the reference's fixed order.
enum Dsv4Group : int {
  kGroupOri = 0,
  kGroupCmpC128 = 1,
  kGroupCmpC4 = 2,
  kGroupIdx = 3,
  kGroupHcaState = 4,
  kGroupCsaState = 5,
  kGroupCsaInnerState = 6,
  kNumDsv4Groups = 7,
};

// The seven groups with page_bytes left 0.
Result<std::vector<CacheGroupSpec>> MakeDsv4CacheGroups(const Dsv4CacheGeometry& geometry);

}  // namespace dsv4::cache
