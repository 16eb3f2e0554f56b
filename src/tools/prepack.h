// dsv4 prepack: writes the prepacked sidecar (docs/prepack.md), the
// checkpoint's block weights in the kernel-ready layout of
// checkpoint/prepacked.h, so that startup maps it instead of repacking.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dsv4::tools {

struct PrepackOptions {
  std::string model_dir;
  std::string output;     // empty: <model_dir>/dsv4-stacked-r{ranks}.safetensors
  int64_t ranks = 1;      // expert-parallel ranks; must divide n_routed_experts
  bool force = false;     // replace an existing output
  bool progress = false;  // report progress on stderr (base/progress.h)
};

struct PrepackSummary {
  std::string path;
  uint64_t bytes = 0;  // file size
  int64_t num_tensors = 0;
  double seconds = 0;
};

// Streams tensor by tensor from the memory-mapped checkpoint (each source's
// pages are dropped from this process once copied, so the peak RSS stays at
// a few conversion buffers), into "<dir>/.<name>.XXXXXX.tmp" beside the
// output, which gets the first shard's permission bits & 0666, is fsync'ed
// and renamed into place (then the directory is fsync'ed).  The source
// fingerprint is taken before packing and checked again before the rename: a
// checkpoint that changed meanwhile publishes nothing.
// Errors: InvalidArgument for an existing output without `force` or ranks not
// dividing the expert count; DataLoss for a wo_a value that is not exact in
// BF16 or a tid2eid id out of range or repeated; the checkpoint's own errors.
Result<PrepackSummary> Prepack(const PrepackOptions& options);

}  // namespace dsv4::tools
