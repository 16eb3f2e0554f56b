#include "model/model_cache.h"

#include "base/logging.h"

namespace dsv4::model {

ModelCache::ModelCache(std::vector<std::unique_ptr<AttentionCache>> layers,
                       std::unique_ptr<AttentionCache> mtp, int64_t num_slots)
    : layers_(std::move(layers)),
      mtp_(std::move(mtp)),
      num_slots_(num_slots),
      in_use_(static_cast<size_t>(num_slots), false) {
  for (const auto& c : layers_) DSV4_CHECK(c->num_slots() == num_slots);
  if (mtp_ != nullptr) DSV4_CHECK(mtp_->num_slots() == num_slots);
}

void ModelCache::Reset(int64_t slot) {
  DSV4_CHECK(slot >= 0 && slot < num_slots_);
  for (auto& c : layers_) c->Reset(slot);
  ResetMtp(slot);
}

void ModelCache::ResetMtp(int64_t slot) {
  DSV4_CHECK(slot >= 0 && slot < num_slots_);
  if (mtp_ != nullptr) mtp_->Reset(slot);
}

Result<int64_t> ModelCache::AcquireSlot() {
  for (int64_t s = 0; s < num_slots_; ++s) {
    if (!in_use_[static_cast<size_t>(s)]) {
      in_use_[static_cast<size_t>(s)] = true;
      Reset(s);
      return s;
    }
  }
  return ResourceExhausted("all {} model cache slots are in use", num_slots_);
}

void ModelCache::ReleaseSlot(int64_t slot) {
  DSV4_CHECK(slot >= 0 && slot < num_slots_ && in_use_[static_cast<size_t>(slot)]);
  in_use_[static_cast<size_t>(slot)] = false;
}

int64_t ModelCache::NumCachedTokens(int64_t slot) const {
  return layers_.empty() ? 0 : layers_.front()->NumCachedTokens(slot);
}

int64_t ModelCache::NumMtpCachedTokens(int64_t slot) const {
  return mtp_ == nullptr ? 0 : mtp_->NumCachedTokens(slot);
}

AttentionCache& ModelCache::layer(int64_t layer) {
  DSV4_CHECK(layer >= 0 && layer <= num_layers());
  if (layer == num_layers()) {
    DSV4_CHECK(mtp_ != nullptr);
    return *mtp_;
  }
  return *layers_[static_cast<size_t>(layer)];
}

const AttentionCache& ModelCache::layer(int64_t layer) const {
  return const_cast<ModelCache*>(this)->layer(layer);
}

size_t ModelCache::FixedBytesPerSlot() const {
  size_t n = 0;
  for (const auto& c : layers_) n += c->FixedBytesPerSlot();
  if (mtp_ != nullptr) n += mtp_->FixedBytesPerSlot();
  return n;
}

bool ModelCache::external_pages() const {
  return !layers_.empty() && layers_.front()->external_pages();
}

size_t ModelCache::PageBytes(cache::Dsv4Group group) const {
  size_t n = 0;
  for (int64_t l = 0; l < num_layers() + (has_mtp() ? 1 : 0); ++l) {
    const PagedRows* rows = layer(l).history(group);
    if (rows != nullptr) n += rows->page_bytes();
  }
  return n;
}

int64_t ModelCache::NumPoolPages(cache::Dsv4Group group) const {
  for (int64_t l = 0; l < num_layers() + (has_mtp() ? 1 : 0); ++l) {
    const PagedRows* rows = layer(l).history(group);
    if (rows != nullptr) return rows->num_pages();
  }
  return 0;
}

size_t ModelCache::AllocatedBytes() const {
  size_t n = FixedBytesPerSlot() * static_cast<size_t>(num_slots_);
  for (int64_t l = 0; l < num_layers() + (has_mtp() ? 1 : 0); ++l) {
    for (cache::Dsv4Group g : kPooledGroups) {
      const PagedRows* rows = layer(l).history(g);
      if (rows != nullptr) n += rows->pool_bytes();
    }
  }
  return n;
}

void ModelCache::FillPools(bf16 value) {
  for (int64_t l = 0; l < num_layers() + (has_mtp() ? 1 : 0); ++l) {
    for (cache::Dsv4Group g : kPooledGroups) {
      PagedRows* rows = layer(l).history(g);
      if (rows != nullptr) rows->FillPool(value);
    }
  }
}

}  // namespace dsv4::model
