// A checkpoint directory: config.json plus one safetensors file
// (model.safetensors) or shards listed by model.safetensors.index.json.
// Tensors are zero-copy views into the memory-mapped shards.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "checkpoint/safetensors.h"
#include "tensor/tensor.h"

namespace dsv4 {

class Checkpoint {
 public:
  // Opens every shard and validates the index against the shards: shard names
  // must be plain file names (no absolute paths, no ".."), every tensor the
  // index names must be in its shard, and no tensor may appear twice.
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

 private:
  Checkpoint() = default;
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name -> shard index
};

}  // namespace dsv4
