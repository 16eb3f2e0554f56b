// A checkpoint directory: config.json plus one safetensors file
// (model.safetensors) or shards listed by model.safetensors.index.json.
// Tensors are zero-copy views into the memory-mapped shards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "checkpoint/safetensors.h"
#include "tensor/tensor.h"

namespace dsv4::checkpoint {

// The parsed model.safetensors.index.json.
struct CheckpointIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::optional<uint64_t> total_size;             // metadata.total_size, if present
};

// True for a plain file name: non-empty, no '/', '\\' or NUL, not "." or "..".
bool IsSafeShardName(std::string_view name);

// Parses index JSON text (pure: the fuzz target drives it).  Requires a
// non-empty `weight_map` object of string values that are safe shard names;
// `metadata` and `metadata.total_size` are optional but type-checked.
// `file` names the file in messages.
Result<CheckpointIndex> ParseCheckpointIndex(const std::string& json_text, const std::string& file);

class Checkpoint {
 public:
  // Opens every shard and validates the index against the shards: shard names
  // must be plain file names (no absolute paths, no ".."), every tensor the
  // index names must be in its shard, every tensor of a shard must be listed
  // for that shard, and no tensor may appear twice.  A metadata.total_size
  // that differs from the summed tensor bytes is logged as a warning
  // (docs/checkpoint.md).  Without an index, <dir>/model.safetensors is the
  // only shard; having both is an error.
  static Result<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // nullptr if absent.
  const TensorView* Find(std::string_view name) const;
  // The tensor, or an error naming the file and tensor if it is missing or its
  // dtype/shape differ from the expectation.
  Result<const TensorView*> Require(std::string_view name, DType dtype, const Shape& shape) const;
  // Shard file path holding `name` ("" if absent).
  std::string FileOf(std::string_view name) const;
  std::vector<std::string> Names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }

  // Installs the prepacked sidecar (docs/prepack.md): from now on Find,
  // Require and FileOf answer from `overlay` for every name it holds and from
  // the shards otherwise.  Names() and shards() still describe the shards.
  void SetOverlay(std::unique_ptr<SafetensorsFile> overlay) { overlay_ = std::move(overlay); }
  const SafetensorsFile* overlay() const { return overlay_.get(); }

  // Expert parallelism (docs/scale-out.md "Memory").  A layer's routed
  // experts are `<layer>.experts.{e}.*` in the shards, or, when the sidecar
  // stacks that layer, its `<layer>.experts.{w13,w2}.*` whose leading
  // [R, E/R] dims flatten to the expert id whatever R is.
  //
  // Bytes of experts [first, last) of num_experts in every layer, counted
  // where the model binds them from (the sidecar for a layer it stacks).
  int64_t RoutedExpertBytes(int64_t first, int64_t last, int64_t num_experts) const;
  // Unmaps every routed-expert byte this process never reads: the experts
  // outside [first, last) (their per-expert tensors leave Find), and the
  // shards' per-expert tensors of the layers the sidecar stacks.  Returns the
  // bytes unmapped (whole pages).  REQUIRES: the model bound only [first,
  // last), and nothing reads the checkpoint's other experts again.
  int64_t UnmapRoutedExpertsOutside(int64_t first, int64_t last, int64_t num_experts);

  // Drops this process's resident pages of tensor `name` where Find finds it
  // (SafetensorsFile::DropResident: whole pages inside the tensor; the bytes
  // stay readable).  For tensors the model copied into another layout at
  // load.  Returns the bytes dropped; 0 for an unknown name.  Remembers the
  // tensor (DroppedRanges).  Called while loading, one thread at a time.
  int64_t DropResidentPages(std::string_view name) const;

  // The mapped address range [first, second) of every tensor
  // DropResidentPages dropped: bytes the process no longer reads, which
  // whatever walks the mapping afterwards (the huge-page move, a page-in)
  // should leave alone rather than bring back into memory.
  std::vector<std::pair<uintptr_t, uintptr_t>> DroppedRanges() const;

 private:
  Checkpoint() = default;
  Status OpenShards(const CheckpointIndex& index, const std::string& index_path);
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t, std::less<>> where_;              // tensor name -> shard index
  std::unique_ptr<SafetensorsFile> overlay_;                      // null unless SetOverlay
  mutable std::vector<std::pair<uintptr_t, uintptr_t>> dropped_;  // DroppedRanges
};

}  // namespace dsv4::checkpoint
