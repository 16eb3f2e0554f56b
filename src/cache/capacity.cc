#include "cache/capacity.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace dsv4::cache {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t CountPages(const std::vector<PageRange>& ranges) {
  int64_t n = 0;
  for (const PageRange& r : ranges) n += r.size();
  return n;
}

}  // namespace

int64_t PeakPagesPerRequest(const CacheGroupSpec& spec, int64_t max_context,
                            int64_t max_step_tokens, int64_t num_spec, int64_t prefill_align) {
  if (!spec.is_ring()) return CeilDiv(max_context, spec.tokens_per_page);
  // The page count of a step depends on its start modulo the period below
  // and, once the step is longer than the live window, on its length only
  // modulo that period; enumerate starts far enough from 0 that the clamp at
  // position 0 hides nothing.
  const int64_t period = std::lcm(std::lcm<int64_t>(spec.align, spec.tokens_per_page),
                                  std::max<int64_t>(prefill_align, 1));
  const int64_t base = CeilDiv(spec.lookback + spec.align + spec.tokens_per_page, period) * period;
  const int64_t longest_short = spec.lookback + spec.align + 2 * spec.tokens_per_page + period;
  int64_t peak = 0;
  for (int64_t start = base; start < base + period; ++start) {
    // Decode step (any position): the tail row plus num_spec draft rows.
    peak = std::max(peak, CountPages(spec.RequiredPages({start, start + 1 + num_spec, num_spec})));
    // Between steps: the live pages.
    peak = std::max(peak, spec.LivePages(start).size());
    if (start % std::max<int64_t>(prefill_align, 1) != 0) continue;
    // Prefill chunks (no drafts): every length up to where the count
    // repeats, and the longest.
    const int64_t last = std::min(max_step_tokens, longest_short);
    for (int64_t n = 1; n <= last; ++n) {
      peak = std::max(peak, CountPages(spec.RequiredPages({start, start + n, 0})));
    }
    peak = std::max(peak, CountPages(spec.RequiredPages({start, start + max_step_tokens, 0})));
  }
  return peak;
}

Result<CapacityPlan> PlanCapacity(const std::vector<CacheGroupSpec>& groups,
                                  const CapacityOptions& o) {
  if (o.max_model_len <= 0 || o.max_step_tokens <= 0 || o.num_spec < 0 || o.max_seqs <= 0 ||
      o.prefill_align <= 0 || o.slot_ring_bytes < 0 || o.snapshots_per_slot < 0 ||
      (o.snapshots_per_slot > 0 && o.slot_ring_bytes == 0)) {
    return InvalidArgument(
        "capacity: max_model_len, max_step_tokens, max_seqs and prefill_align must be positive "
        "and K, slot_ring_bytes, snapshots_per_slot >= 0 (snapshots only of per-slot rings)");
  }
  CapacityPlan plan;
  plan.unit_tokens = 1;
  // A slot's snapshots cost what its rings cost, each.
  plan.bytes_per_slot = o.slot_ring_bytes * (1 + o.snapshots_per_slot);
  plan.ring_bytes_per_request = plan.bytes_per_slot;
  for (const CacheGroupSpec& g : groups) {
    DSV4_RETURN_IF_ERROR(ValidateGroupSpec(g));
    const int64_t peak =
        PeakPagesPerRequest(g, o.max_model_len, o.max_step_tokens, o.num_spec, o.prefill_align);
    plan.peak_pages.push_back(peak);
    plan.bytes_per_slot += peak * g.page_bytes;
    if (g.is_ring()) {
      plan.ring_bytes_per_request += peak * g.page_bytes;
    } else {
      plan.unit_tokens = std::lcm<int64_t>(plan.unit_tokens, g.tokens_per_page);
    }
  }
  for (const CacheGroupSpec& g : groups) {
    if (!g.is_ring())
      plan.history_bytes_per_unit += plan.unit_tokens / g.tokens_per_page * g.page_bytes;
  }
  const int64_t units_per_slot = CeilDiv(o.max_model_len, plan.unit_tokens);
  const int64_t history_bytes_per_slot = units_per_slot * plan.history_bytes_per_unit;
  if (o.budget_bytes < plan.ring_bytes_per_request + history_bytes_per_slot) {
    return ResourceExhausted(
        "KV cache budget of {} bytes per partition cannot hold one request of --max-model-len {} "
        "({} bytes per slot); lower --max-model-len or raise --kv-cache-memory / "
        "--memory-utilization",
        o.budget_bytes, o.max_model_len, plan.ring_bytes_per_request + history_bytes_per_slot);
  }
  // Rings for max_seqs requests, but from at most half the budget (the rest
  // is context: many short requests and a few long ones both fit), and never
  // so many that one max-length history no longer fits.
  plan.num_ring_requests = o.max_seqs;
  if (plan.ring_bytes_per_request > 0) {
    const int64_t half = std::max<int64_t>(1, o.budget_bytes / 2 / plan.ring_bytes_per_request);
    const int64_t fit = (o.budget_bytes - history_bytes_per_slot) / plan.ring_bytes_per_request;
    plan.num_ring_requests = std::min({o.max_seqs, o.slot_ring_bytes > 0 ? fit : half, fit});
  }
  const int64_t left = o.budget_bytes - plan.num_ring_requests * plan.ring_bytes_per_request;
  // More context than the ring pools' requests could ever hold is never used.
  const int64_t max_units = plan.num_ring_requests * units_per_slot;
  plan.num_units = plan.history_bytes_per_unit > 0
                       ? std::min(max_units, left / plan.history_bytes_per_unit)
                       : max_units;
  plan.num_slots = std::min(plan.num_ring_requests, plan.num_units / units_per_slot);
  for (size_t g = 0; g < groups.size(); ++g) {
    const CacheGroupSpec& spec = groups[g];
    const int64_t pages = spec.is_ring()
                              ? plan.num_ring_requests * plan.peak_pages[g]
                              : plan.num_units * (plan.unit_tokens / spec.tokens_per_page);
    plan.num_pages.push_back(pages);
    plan.total_bytes += pages * spec.page_bytes;
  }
  plan.num_snapshots = plan.num_ring_requests * o.snapshots_per_slot;
  plan.total_bytes += (plan.num_ring_requests + plan.num_snapshots) * o.slot_ring_bytes;
  return plan;
}

std::string DescribeCapacity(const std::vector<CacheGroupSpec>& groups, const CapacityOptions& o,
                             const CapacityPlan& plan) {
  std::string rings = o.slot_ring_bytes > 0
                          ? fmt::format("{} runner slots with per-slot rings of {} bytes",
                                        plan.num_ring_requests, o.slot_ring_bytes)
                          : fmt::format("{} requests' rings", plan.num_ring_requests);
  if (plan.num_snapshots > 0) {
    rings += fmt::format(" + {} prefix-cache snapshots of them", plan.num_snapshots);
  }
  std::string s = fmt::format(
      "kv cache per partition: {} slots at max context {} ({} bytes per slot, {:.1f} MiB), "
      "{}, {} tokens of history, {:.1f} MiB of {:.1f} MiB budget; pages:",
      plan.num_slots, o.max_model_len, plan.bytes_per_slot, plan.bytes_per_slot / 1048576.0, rings,
      plan.num_units * plan.unit_tokens, plan.total_bytes / 1048576.0, o.budget_bytes / 1048576.0);
  for (size_t g = 0; g < groups.size(); ++g) {
    s += fmt::format(" {}={}", groups[g].name, plan.num_pages[g]);
  }
  return s;
}

}  // namespace dsv4::cache
