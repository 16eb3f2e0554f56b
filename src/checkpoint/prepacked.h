// The prepacked sidecar (docs/prepack.md): the checkpoint's block weights in
// the kernel-ready layout, written by `dsv4 prepack` and memory-mapped at
// startup instead of repacking.
//
// This header holds what the writer (tools/prepack) and the loader (model/)
// must agree on: the layout (PlanPrepackedLayout), the source fingerprint and
// the staged open with its fall-back decisions (OpenPrepacked).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "checkpoint/safetensors.h"
#include "tensor/tensor.h"

namespace dsv4::checkpoint {

inline constexpr char kPrepackedFormat[] = "dsv4-stacked";
// Bump whenever a name, dtype, shape, byte order or alignment of the layout
// changes: older sidecars then read as stale and are ignored.
// v2: wo_a stays FP8 (the kernels read it as FP8 since GemmBf16Fp8; v1
// stored it dequantized to BF16, twice the bytes per decode step).
inline constexpr int kPrepackedLayoutVersion = 2;
// The kernels the layout is for: the CPU kernels (scalar, AVX2, AVX-512 share
// one row-major layout, chosen at run time).  A layout for another kernel
// family (CUDA, AMX tiles) must use another name.
inline constexpr char kPrepackedIsaFamily[] = "cpu-rowmajor";
// Every tensor of the sidecar starts at a multiple of this (cache line,
// AVX-512 vector).
inline constexpr uint64_t kPrepackedAlignment = 64;

// The __metadata__ key holding the checksum (base/checksum.h) of the
// sidecar's data region, computed by `dsv4 prepack` after writing and
// verified at every load.
inline constexpr char kPrepackedChecksumKey[] = "data_xxh3";

// "dsv4-stacked-r{ranks}.safetensors".
std::string PrepackedFileName(int64_t ranks);

// One sidecar tensor and how its bytes derive from checkpoint tensors.
struct PackedTensor {
  enum Kind {
    kConcat,    // the sources' bytes back to back (one source: a plain copy)
    kI64ToI32,  // sources {I64 id table}, narrowed (values checked against `max_id`)
  };
  std::string name;
  DType dtype;
  Shape shape;
  Kind kind = kConcat;
  std::vector<std::string> sources;  // checkpoint tensor names
  int64_t max_id = 0;                // kI64ToI32: ids must lie in [0, max_id)
};

// The sidecar's tensors, in file order, for `ckpt` (described by `cfg`) and
// `ranks` expert-parallel ranks.  Every checkpoint tensor except embed.weight
// and head.weight is covered:
//   <blk>.ffn.experts.w13.{weight,scale}  rank-stacked [ranks, E/ranks, 2*inter, ...]:
//       expert e's w1 rows then its w3 rows (one gate-up GEMM per expert)
//   <blk>.ffn.experts.w2.{weight,scale}   rank-stacked [ranks, E/ranks, dim, ...]
//   <blk>.ffn.shared_experts.w13.{weight,scale}  w1 rows then w3 rows, when
//       the scale blocks allow (INT8, or FP8 with shared_inter % 128 == 0)
//   <blk>.ffn.gate.tid2eid  I32
//   every other tensor as stored.
// Errors: InvalidArgument when ranks < 1 or does not divide n_routed_experts;
// NotFound/InvalidArgument naming the tensor when the checkpoint lacks an
// expert tensor or holds one of an unexpected dtype.
Result<std::vector<PackedTensor>> PlanPrepackedLayout(const Checkpoint& ckpt,
                                                      const ModelConfig& cfg, int64_t ranks);

// What the fingerprint covers, kept in the metadata so that a mismatch can
// say what changed.
struct PrepackedSource {
  int64_t ranks = 0;
  std::string config_sha256;      // of config.json's bytes
  std::string weight_map_sha256;  // of the sorted tensor -> shard file map
  struct Shard {
    std::string name;  // file name in the checkpoint directory
    uint64_t size = 0;
    int64_t mtime_ns = 0;
  };
  std::vector<Shard> shards;  // sorted by name

  // SHA-256 of the canonical JSON (sorted keys, no spaces) of format,
  // layout version, ISA family, ranks, the two hashes and the shard list.
  std::string Fingerprint() const;
};

// Describes the checkpoint in `ckpt.dir()` as it is on disk now (stat of every
// shard, config.json read again).
Result<PrepackedSource> DescribePrepackedSource(const Checkpoint& ckpt, int64_t ranks);

// The sidecar's __metadata__ for `source`.
std::map<std::string, std::string> PrepackedMetadata(const PrepackedSource& source);

// Why a sidecar was or was not used.
enum class PrepackedOutcome {
  kUsed,        // hot and valid: mapped, overlaid on the checkpoint
  kDisabled,    // policy "off"
  kMissing,     // no file
  kCold,        // sampled page-cache residency below the threshold
  kStale,       // format, layout, ISA family, ranks or fingerprint differ
  kMismatch,    // fingerprint matches but the tensor names differ from the plan
  kUnreadable,  // cannot open/map, or the header cannot be parsed
};
const char* PrepackedOutcomeName(PrepackedOutcome outcome);

struct PrepackedOpenOptions {
  int64_t ranks = 1;
  // Resident fraction of the sampled pages required to use the sidecar.
  double min_residency = 0.95;
  // Threads hashing the data region for the checksum check (0 = every CPU).
  int verify_threads = 0;
};

struct PrepackedDecision {
  PrepackedOutcome outcome = PrepackedOutcome::kMissing;
  std::string path;
  std::string reason;                     // one line; empty for kUsed
  double residency = -1;                  // sampled resident fraction; -1 if not sampled
  double verify_seconds = 0;              // kUsed: time spent checking the data checksum
  std::unique_ptr<SafetensorsFile> file;  // kUsed only: MAP_SHARED mapping
};

// Opens the sidecar at `path` for `ckpt`/`cfg` (docs/prepack.md "Loading"):
// one read-only descriptor for the whole sequence; missing -> kMissing;
// mincore residency of 64 evenly spaced 4 MiB windows (the whole file up to
// 256 MiB) below min_residency -> kCold; metadata mismatch -> kStale with what
// changed; tensor names != plan -> kMismatch.  After that the sidecar is
// trusted to be ours, so any defect (malformed or truncated data region, a
// dtype, shape or alignment other than the plan's) is a DataLoss error naming
// the file and tensor, never a silent fallback; so is a data region whose
// checksum differs from the one recorded at write time.  A sidecar without a
// recorded checksum (written before checksums existed) is kStale.
Result<PrepackedDecision> OpenPrepacked(const std::string& path, const Checkpoint& ckpt,
                                        const ModelConfig& cfg,
                                        const PrepackedOpenOptions& options);

// Whether `path` is a regular file whose safetensors header declares
// format dsv4-stacked (its data region is not read): what `dsv4 prepack
// --force` may replace.
bool IsPrepackedSidecarFile(const std::string& path);

// The rank count a sidecar's metadata records (`dsv4 prepack --ranks N`),
// read from its header only; 0 when `path` is no readable sidecar.  An
// expert-parallel engine opens a sidecar of any rank count: expert e is
// entry e of the flattened leading [R, E/R] dims whatever R is.
int64_t PrepackedFileRanks(const std::string& path);

// The windows [offset, offset + length) that residency sampling inspects in a
// file of `file_size` bytes: all of it up to 256 MiB, else 64 evenly spaced
// 4 MiB windows starting at multiples of `page_size` (the last one ending at
// the last page).  Pure (tested directly).
std::vector<std::pair<uint64_t, uint64_t>> ResidencyWindows(uint64_t file_size, uint64_t page_size);

}  // namespace dsv4::checkpoint
