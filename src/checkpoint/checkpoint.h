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

 private:
  Checkpoint() = default;
  Status OpenShards(const CheckpointIndex& index, const std::string& index_path);
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name -> shard index
  std::unique_ptr<SafetensorsFile> overlay_;          // null unless SetOverlay
};

}  // namespace dsv4::checkpoint
