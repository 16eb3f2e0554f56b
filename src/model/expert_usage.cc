#include "model/expert_usage.h"

#include <algorithm>

#include "base/logging.h"

namespace dsv4::model {

LayerExpertUsage::LayerExpertUsage(int64_t num_experts)
    : marks_(static_cast<size_t>(num_experts)) {}

void LayerExpertUsage::Mark(const int32_t* ids, int64_t count) {
  const auto n = static_cast<int64_t>(marks_.size());
  for (int64_t i = 0; i < count; ++i) {
    const int32_t e = ids[i];
    DSV4_CHECK(e >= 0 && e < n);
    uint8_t& m = marks_[static_cast<size_t>(e)];
    distinct_ += m == 0 ? 1 : 0;
    m = 1;
  }
}

void LayerExpertUsage::Clear() {
  std::fill(marks_.begin(), marks_.end(), uint8_t{0});
  distinct_ = 0;
}

ExpertUsage::ExpertUsage(int64_t num_layers, int64_t num_experts)
    : layers_(static_cast<size_t>(num_layers), LayerExpertUsage(num_experts)) {}

LayerExpertUsage& ExpertUsage::layer(int64_t id) {
  DSV4_CHECK(id >= 0 && id < num_layers());
  return layers_[static_cast<size_t>(id)];
}

const LayerExpertUsage& ExpertUsage::layer(int64_t id) const {
  DSV4_CHECK(id >= 0 && id < num_layers());
  return layers_[static_cast<size_t>(id)];
}

int64_t ExpertUsage::TotalDistinct() const {
  int64_t total = 0;
  for (const LayerExpertUsage& l : layers_) total += l.distinct();
  return total;
}

void ExpertUsage::Clear() {
  for (LayerExpertUsage& l : layers_) l.Clear();
}

}  // namespace dsv4::model
