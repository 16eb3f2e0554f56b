// Resident before ready (docs/deploy.md "Resident before ready"): --populate
// reads every page of the mapped checkpoint the model still reads, --mlock
// locks the process's memory.  Both leave out the tensors the model copied
// into its own layouts and dropped from the resident set
// (Checkpoint::DroppedRanges): on a native checkpoint every routed expert,
// and every FP8 weight where the BF16 dot kernel runs; reading or locking
// them back would hold the checkpoint twice (copies + file pages).  The
// engine applies them after it starts (EngineOptions::populate, ::mlock),
// bench's bare loop after its load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "launch/huge_pages.h"

namespace dsv4::launch {

// Reads one byte per page of every mapped checkpoint file (madvise WILLNEED
// first) but the whole pages inside the `skip` ranges (a read page's fault
// may still map the whole large folio around it, up to 2 MiB of file on
// Linux 6.x: a skipped range can come back that much at each end), with a
// progress line
// on stderr; returns the summary ("populate: 1.2 GiB of mapped checkpoint
// (3 regions) resident in 0.40 s; 9.1 GiB copied at load left out").
Result<std::string> PopulateCheckpointMappings(const std::vector<AddressRange>& skip = {});

// Locks the process's memory: with no `skip` ranges mlockall(MCL_CURRENT)
// (faults everything in); else the mapped checkpoint outside them is read
// first (PopulateCheckpointMappings) and mlockall(MCL_CURRENT | MCL_ONFAULT)
// locks what is resident, leaving the skipped file pages out (they would be
// faulted in and pinned otherwise).  Returns the log line with the bytes
// mapped and the time taken, or FailedPrecondition from MlockError.
Result<std::string> LockAllMemory(const std::vector<AddressRange>& skip = {});

// The refusal when mlockall fails: errno's text, RLIMIT_MEMLOCK (-1 =
// unlimited) against the process's mapped bytes, and how to raise it.
std::string MlockError(int err, int64_t limit_bytes, int64_t mapped_bytes);

// --populate and then --mlock as asked, logging a line for each.
Status MakeResident(bool populate, bool mlock, const std::vector<AddressRange>& skip);

}  // namespace dsv4::launch
