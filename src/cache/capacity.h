// Sizing the page pools from a byte budget (after the weights are resident).
//
// The reference gives every request a maximum-length "slot" in every group,
// including deep compressor-state rings sized for a fixed in-flight margin.
// We size by need instead:
//   - ring groups get, per request, the most pages one request can map at
//     once (PeakPagesPerRequest: what a step reads plus what it must leave
//     live, for any prefill chunk up to the extent and any draft count up to
//     K), for max_seqs requests per partition but from at most half the
//     budget;
//   - full-history groups share the rest of the budget as 128-token units of
//     context, so short requests leave room for more requests.
// A "slot" (one max_model_len request at its peak) is only a unit of report.
//
// Per-slot rings (slot_ring_bytes > 0, the CPU runner): the model keeps each
// request's rings and compressor states in per-slot storage sized by need
// instead of in ring pages.  Ring groups' pages are then bookkeeping that
// costs nothing (page_bytes 0); every ring request costs slot_ring_bytes,
// and num_ring_requests is the number of slots, i.e. the hard limit on
// running requests per partition.  Because that limit is not softened by
// requests at rest holding fewer ring pages than their peak, the rings get
// as many slots as max_seqs allows while one max-length history still fits
// (not at most half the budget): fewer slots than max-length requests the
// budget holds would waste it; oversubscribed history is preemption's job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/cache_spec.h"

namespace dsv4::cache {

// The most pages one request can hold in `spec` at any time, for contexts up
// to `max_context` positions, prefill chunks of up to `max_step_tokens` that
// start at multiples of `prefill_align` (the scheduler cuts non-final chunks
// to whole prefill tiles, so every chunk starts on a tile), and decode steps
// of 1 + num_spec positions at any position.  Full-history groups: the pages
// of max_context positions.
int64_t PeakPagesPerRequest(const CacheGroupSpec& spec, int64_t max_context,
                            int64_t max_step_tokens, int64_t num_spec, int64_t prefill_align);

struct CapacityOptions {
  int64_t budget_bytes = 0;     // per partition
  int64_t max_model_len = 0;    // positions per request
  int64_t max_step_tokens = 0;  // largest prefill chunk of one request in one step
  int64_t num_spec = 0;         // draft positions reserved per decode step (K)
  int64_t prefill_align = 1;    // prefill chunks start at multiples of this (the tile)
  int64_t max_seqs = 0;         // requests per partition the ring pools serve at once
  int64_t slot_ring_bytes = 0;  // > 0: rings are per-slot storage of this many bytes
  // Prefix caching (docs/engine.md §7.2): snapshot buffers of one slot's
  // rolling state (slot_ring_bytes each) per runner slot, charged with the
  // slot (a working one per running request + as many published).  REQUIRES
  // slot_ring_bytes > 0 when positive.
  int64_t snapshots_per_slot = 0;
};

struct CapacityPlan {
  std::vector<int64_t> num_pages;      // [num_groups] pool size per partition
  std::vector<int64_t> peak_pages;     // [num_groups] one max-length request at its peak
  int64_t bytes_per_slot = 0;          // Σ peak_pages * page_bytes
  int64_t ring_bytes_per_request = 0;  // ring part of bytes_per_slot (incl. slot_ring_bytes
                                       // and the slot's snapshots)
  int64_t history_bytes_per_unit = 0;  // full-history bytes of one context unit
  int64_t unit_tokens = 0;             // context unit (lcm of full-history page sizes)
  int64_t num_units = 0;               // context units the full-history pools hold
  int64_t num_ring_requests = 0;       // requests the ring pools hold at their peak
  int64_t num_slots = 0;               // max-length requests that fit at once
  int64_t num_snapshots = 0;           // snapshot buffers (slot_ring_bytes each)
  int64_t total_bytes = 0;             // bytes the pools take (<= budget)
};

// Fails (ResourceExhausted) when the budget cannot hold one max-length request.
Result<CapacityPlan> PlanCapacity(const std::vector<CacheGroupSpec>& groups,
                                  const CapacityOptions& options);

// One line for the startup log.
std::string DescribeCapacity(const std::vector<CacheGroupSpec>& groups,
                             const CapacityOptions& options, const CapacityPlan& plan);

}  // namespace dsv4::cache
