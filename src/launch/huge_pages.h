// Weights in transparent huge pages (docs/deploy.md "Huge pages"): the
// mapped checkpoint files move, in place, into anonymous memory advised
// MADV_HUGEPAGE, so the weight stream walks 2 MiB pages instead of the page
// cache's 4 KiB ones.  CreateLocalEngine does it after the memory plan
// (EngineOptions::hugepages), unless the plan says the weights stream from
// disk; `dsv4 bench`'s bare loop calls it after its own load.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsv4::launch {

// A file-backed mapping of the process (one line of /proc/self/maps).
struct MappedRegion {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  std::string path;
};
// The readable mappings of checkpoint files (*.safetensors) in the text of
// /proc/PID/maps.  Pure, for tests.
std::vector<MappedRegion> CheckpointRegions(const std::string& maps_text);

// The transparent-huge-page mode of the host ("always", "madvise" or "never")
// in the text of /sys/kernel/mm/transparent_hugepage/enabled; "" if the text
// names none.  Pure, for tests.
std::string ThpMode(const std::string& enabled_text);

// An address range [first, second).
using AddressRange = std::pair<uintptr_t, uintptr_t>;

// The pieces of [begin, end) outside the `skip` ranges, in order: all of it
// but the whole `align`-sized blocks (a power of two) inside the skip ranges
// (touching or overlapping ones merged first), so a block a skip range only
// partly covers stays in a piece.  Pure, for tests.
std::vector<AddressRange> PiecesOutside(uintptr_t begin, uintptr_t end,
                                        std::vector<AddressRange> skip, uintptr_t align);

// The pieces of [begin, end) (2 MiB aligned) that the huge-page move copies:
// PiecesOutside the `keep` ranges with 2 MiB blocks.  Pure, for tests.
std::vector<AddressRange> MovedPieces(uintptr_t begin, uintptr_t end,
                                      std::vector<AddressRange> keep);

// Every mapped checkpoint file's 2 MiB-aligned interior, but for the `keep`
// ranges (tensors the model copied into its own layouts and dropped from the
// resident set: Checkpoint::DroppedRanges), which stay unread file pages, is
// copied, 256 MiB at a time, into anonymous memory advised MADV_HUGEPAGE and moved (mremap)
// onto the same addresses, read-only: every pointer into the weights stays
// valid (a TLB entry per 2 MiB; the hardware prefetchers no longer stop at
// every 4 KiB page boundary).  The file's page cache is no longer mapped
// (reclaimable; other processes no longer share the pages).  A no-op with a
// log line when the host's THP mode is never, or when the mapped files exceed
// 90% of MemAvailable (a second guard behind the memory plan: weights that
// stream from disk must stay droppable).  Returns the summary line for the
// log; a chunk that fails to move stays file pages and ends the move with a
// line saying so (never an error: the weights are intact either way).
std::string MoveCheckpointsToHugePages(const std::vector<AddressRange>& keep = {});

}  // namespace dsv4::launch
