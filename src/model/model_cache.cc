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

void ModelCache::SaveSlot(int64_t slot, SlotSnapshot* out) const {
  DSV4_CHECK(slot >= 0 && slot < num_slots_);
  out->counts.clear();
  out->bytes.resize(FixedBytesPerSlot());
  size_t at = 0;
  for (int64_t l = 0; l < num_layers() + (has_mtp() ? 1 : 0); ++l) {
    const AttentionCache& c = layer(l);
    out->counts.push_back(c.NumCachedTokens(slot));
    out->counts.push_back(c.NumCompressed(slot));
    out->counts.push_back(c.NumIndexKeys(slot));
    const size_t n = c.FixedBytesPerSlot();
    c.SaveRolling(slot, std::span<std::byte>(out->bytes).subspan(at, n));
    at += n;
  }
}

Status ModelCache::RestoreSlot(
    int64_t slot, const SlotSnapshot& snapshot,
    const std::array<std::span<const int32_t>, cache::kNumDsv4Groups>& tables) {
  if (slot < 0 || slot >= num_slots_) {
    return InvalidArgument("restore into slot {} of a cache of {} slots", slot, num_slots_);
  }
  if (!external_pages()) {
    return InvalidArgument("restore needs a cache with external pages (shared page pools)");
  }
  const int64_t layers = num_layers() + (has_mtp() ? 1 : 0);
  if (snapshot.counts.size() != static_cast<size_t>(3 * layers) ||
      snapshot.bytes.size() != FixedBytesPerSlot()) {
    return InvalidArgument("snapshot of {} counts / {} bytes for a cache of {} layers / {} bytes",
                           snapshot.counts.size(), snapshot.bytes.size(), layers,
                           FixedBytesPerSlot());
  }
  // Validate every layer before changing any.
  for (int64_t l = 0; l < layers; ++l) {
    const AttentionCache& c = layer(l);
    const auto* counts = &snapshot.counts[static_cast<size_t>(3 * l)];
    if (counts[0] < 0 || counts[1] != c.NumCompressedFor(counts[0]) ||
        counts[2] != c.NumIndexKeysFor(counts[0])) {
      return InvalidArgument("snapshot layer {}: {} tokens with {} compressed rows and {} keys", l,
                             counts[0], counts[1], counts[2]);
    }
    for (cache::Dsv4Group g : kPooledGroups) {
      const PagedRows* rows = c.history(g);
      if (rows == nullptr) continue;
      const int64_t n = g == cache::kGroupIdx ? counts[2] : counts[1];
      if (n % rows->rows_per_page() != 0) {
        return InvalidArgument(
            "snapshot layer {}: {} rows of group {} end inside a page of {} rows (a shared page "
            "must be full)",
            l, n, static_cast<int>(g), rows->rows_per_page());
      }
      const auto table = tables[static_cast<size_t>(g)];
      if (static_cast<int64_t>(table.size()) != n / rows->rows_per_page()) {
        return InvalidArgument("snapshot layer {}: group {} table of {} pages for {} rows", l,
                               static_cast<int>(g), table.size(), n);
      }
      for (int32_t page : table) {
        if (page < 0 || page >= rows->num_pages()) {
          return InvalidArgument("group {}: page {} outside [0, {})", static_cast<int>(g), page,
                                 rows->num_pages());
        }
      }
    }
  }
  size_t at = 0;
  for (int64_t l = 0; l < layers; ++l) {
    AttentionCache& c = layer(l);
    const auto* counts = &snapshot.counts[static_cast<size_t>(3 * l)];
    const size_t n = c.FixedBytesPerSlot();
    const bool csa = c.geometry().compress_ratio == 4;
    c.RestoreRolling(slot, std::span<const std::byte>(snapshot.bytes).subspan(at, n), counts[0],
                     counts[1], counts[2],
                     tables[static_cast<size_t>(csa ? cache::kGroupCmpC4 : cache::kGroupCmpC128)],
                     tables[static_cast<size_t>(cache::kGroupIdx)]);
    at += n;
  }
  return Status::Ok();
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
