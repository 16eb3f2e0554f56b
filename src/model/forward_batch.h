// Per-call metadata of one model forward (architecture decision 3: explicit,
// never a global).  One call runs any mix of sequences, each contributing a
// contiguous run of rows: a prefill chunk continuing from any position, a
// single decode token, or S tokens of a speculative verification step.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "cache/cache_spec.h"

namespace dsv4::model {

// The cache groups whose rows the model stores in page pools addressed by
// the scheduler's block tables: the full-history lists (compressed KV rows of
// ratio-4 layers `cmp_c4`, of the other compressed layers `cmp_c128`, and
// indexer keys `idx`).  The other groups (the window ring and the compressor
// states) are per-slot storage in the model and admission bookkeeping in the
// scheduler (docs/engine.md "Cache groups").  Group ids are the cache's own
// (Dsv4Group): one numbering from the scheduler to the kernels.
inline constexpr std::array<cache::Dsv4Group, 3> kPooledGroups = {
    cache::kGroupCmpC4, cache::kGroupCmpC128, cache::kGroupIdx};

// One slice's pages in the fixed pools of a cache with external pages
// (Model::NewCache with CachePools; empty for a self-managed cache).  Per
// pooled group g: tables[g][i] is the pool page of the slice's logical page i
// (pages cover CachePools::page_tokens source positions from position 0);
// fresh[g] lists pages newly given to the sequence, which the forward zeroes
// in every layer's pool before it writes anything.  Entries of the other
// groups are ignored.  The spans point into caller memory that must stay
// valid for the call.
struct SlicePages {
  std::array<std::span<const int32_t>, cache::kNumDsv4Groups> tables;
  std::array<std::span<const int32_t>, cache::kNumDsv4Groups> fresh;
};

struct SequenceSlice {
  int64_t cache_slot = 0;  // which per-sequence state (ModelCache slot) it reads and extends
  int64_t start_pos = 0;   // absolute position of its first row (== tokens already cached)
  int64_t num_tokens = 0;  // rows it contributes
  int64_t row_offset = 0;  // index of its first row in the batch
  SlicePages pages;        // external-page caches only
};

struct ForwardBatch {
  std::vector<SequenceSlice> seqs;
  std::vector<int32_t> token_ids;   // [num_tokens] input ids (also drive hash routing)
  std::vector<int64_t> positions;   // [num_tokens] absolute positions
  std::vector<int64_t> logit_rows;  // rows whose logits the caller wants, ascending

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }

  // Appends one sequence's rows [start_pos, start_pos + ids.size()).
  void Add(int64_t cache_slot, int64_t start_pos, const std::vector<int32_t>& ids) {
    SequenceSlice s;
    s.cache_slot = cache_slot;
    s.start_pos = start_pos;
    s.num_tokens = static_cast<int64_t>(ids.size());
    s.row_offset = num_tokens();
    seqs.push_back(s);
    for (size_t i = 0; i < ids.size(); ++i) {
      token_ids.push_back(ids[i]);
      positions.push_back(start_pos + static_cast<int64_t>(i));
    }
  }
};

}  // namespace dsv4::model
