// Which routed experts the MoE layers' routing selected (dsv4 bench's
// measured weight bytes per decode token, docs/performance.md): an optional
// observer the caller hands to a forward (ForwardOutputs::expert_usage).
// Allocated once; marking a layer's selections is O(rows x top_k) with no
// allocation, lock or global, and a forward without an observer pays one
// null check per MoE layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv4::model {

// One MoE layer: the distinct experts marked since the last Clear.
class LayerExpertUsage {
 public:
  explicit LayerExpertUsage(int64_t num_experts);

  // Marks every id of ids[0, count) (each in [0, num_experts)).
  void Mark(const int32_t* ids, int64_t count);
  void Clear();
  int64_t distinct() const { return distinct_; }
  bool touched(int64_t expert) const { return marks_[static_cast<std::size_t>(expert)] != 0; }
  int64_t num_experts() const { return static_cast<int64_t>(marks_.size()); }

 private:
  std::vector<uint8_t> marks_;  // [num_experts]
  int64_t distinct_ = 0;
};

// Every MoE layer of a model, indexed by block layer id (the main layers,
// then the MTP block at num_hidden_layers).  Not thread-safe: one forward at
// a time marks it (a forward runs its layers one after another).
class ExpertUsage {
 public:
  ExpertUsage(int64_t num_layers, int64_t num_experts);

  LayerExpertUsage& layer(int64_t id);
  const LayerExpertUsage& layer(int64_t id) const;
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // Distinct experts summed over the layers.
  int64_t TotalDistinct() const;
  void Clear();

 private:
  std::vector<LayerExpertUsage> layers_;
};

}  // namespace dsv4::model
