#include "cache/cache_spec.h"

#include <algorithm>

#include "cache/block_table.h"

namespace dsv4::cache {

int64_t CacheGroupSpec::LiveFrom(int64_t num_computed) const {
  if (!is_ring()) return 0;
  const int64_t aligned = num_computed - num_computed % align;
  return std::max<int64_t>(0, aligned - lookback);
}

PageRange CacheGroupSpec::PagesOf(int64_t begin, int64_t end) const {
  if (end <= begin) return {};
  return {PageOf(begin), PageOf(end - 1) + 1};
}

PageRange CacheGroupSpec::LivePages(int64_t num_computed) const {
  return PagesOf(LiveFrom(num_computed), num_computed);
}

std::vector<PageRange> CacheGroupSpec::RequiredPages(const StepSpan& span) const {
  std::vector<PageRange> out;
  if (span.end <= span.start) return out;
  if (!is_ring()) {
    out.push_back(PagesOf(0, span.end));
    return out;
  }
  // Reads: what earlier steps left live.  Writes: whatever any accepted
  // prefix may leave live, i.e. from LiveFrom of the shortest commit on (the
  // positions before it are dead by the time this step is committed).
  const PageRange read = PagesOf(LiveFrom(span.start), span.start);
  const int64_t min_commit = span.end - span.num_spec;
  const PageRange write = PagesOf(std::max(span.start, LiveFrom(min_commit)), span.end);
  if (read.empty()) {
    out.push_back(write);
  } else if (read.end >= write.begin) {
    out.push_back({read.begin, std::max(read.end, write.end)});
  } else {
    out.push_back(read);
    out.push_back(write);
  }
  return out;
}

int64_t RowOf(const CacheGroupSpec& spec, const BlockTable& table, int64_t pos) {
  const int32_t page = table.At(spec.PageOf(pos));
  if (page == kNoPage) return -1;
  return int64_t{page} * spec.rows_per_page() + (pos % spec.tokens_per_page) / spec.tokens_per_row;
}

Status ValidateGroupSpec(const CacheGroupSpec& spec) {
  if (spec.tokens_per_page <= 0 || spec.tokens_per_row <= 0 ||
      spec.tokens_per_page % spec.tokens_per_row != 0) {
    return InvalidArgument(
        "cache group '{}': tokens_per_page {} must be a positive multiple of tokens_per_row {}",
        spec.name, spec.tokens_per_page, spec.tokens_per_row);
  }
  if (spec.is_ring() && (spec.align <= 0 || spec.lookback < 0)) {
    return InvalidArgument(
        "cache group '{}': ring needs align > 0 and lookback >= 0, got {} and {}", spec.name,
        spec.align, spec.lookback);
  }
  if (spec.page_bytes < 0) {
    return InvalidArgument("cache group '{}': negative page_bytes {}", spec.name, spec.page_bytes);
  }
  return Status::Ok();
}

Result<std::vector<CacheGroupSpec>> MakeDsv4CacheGroups(const Dsv4CacheGeometry& g) {
  if (g.block_size <= 0 || g.window <= 0 || g.csa_ratio <= 0 || g.hca_ratio <= 0 ||
      g.csa_state_page_tokens <= 0 || g.hca_state_page_tokens <= 0) {
    return InvalidArgument(
        "cache geometry: block size, window, ratios and state page sizes must be positive");
  }
  // A compressed page stores whole compressed rows: row b (positions
  // [b*r, (b+1)*r)) must lie in the page of its source positions.
  if (g.block_size % g.csa_ratio != 0 || g.block_size % g.hca_ratio != 0) {
    return InvalidArgument(
        "--block-size {} must be a multiple of the compress ratios {} and {} so that each "
        "compressed row lies in one page",
        g.block_size, g.csa_ratio, g.hca_ratio);
  }
  auto full = [&](const char* name, int32_t ratio) {
    CacheGroupSpec s;
    s.name = name;
    s.kind = GroupKind::kFullHistory;
    s.tokens_per_page = g.block_size;
    s.tokens_per_row = ratio;
    return s;
  };
  auto ring = [&](const char* name, int32_t page_tokens, int32_t align, int32_t lookback) {
    CacheGroupSpec s;
    s.name = name;
    s.kind = GroupKind::kRing;
    s.tokens_per_page = page_tokens;
    s.align = align;
    s.lookback = lookback;
    return s;
  };
  std::vector<CacheGroupSpec> groups;
  groups.push_back(ring("ori", g.block_size, 1, g.window - 1 + (g.mtp_in_ori ? 1 : 0)));
  groups.push_back(full("cmp_c128", g.hca_ratio));
  groups.push_back(full("cmp_c4", g.csa_ratio));
  groups.push_back(full("idx", g.csa_ratio));
  // HCA compressor: only the open block of `hca_ratio` tokens (no overlap).
  groups.push_back(ring("hca_state", g.hca_state_page_tokens, g.hca_ratio, 0));
  // CSA compressors (attention and indexer) overlap one previous block.
  groups.push_back(ring("csa_state", g.csa_state_page_tokens, g.csa_ratio, g.csa_ratio));
  groups.push_back(ring("csa_inner_state", g.csa_state_page_tokens, g.csa_ratio, g.csa_ratio));
  return groups;
}

}  // namespace dsv4::cache
