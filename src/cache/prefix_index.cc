#include "cache/prefix_index.h"

#include <algorithm>

#include "base/logging.h"

namespace dsv4::cache {

PrefixIndex::PrefixIndex(int32_t page_tokens) : page_tokens_(page_tokens) {
  DSV4_CHECK(page_tokens > 0);
}

std::vector<const PrefixEntry*> PrefixIndex::Match(const PageHash& root,
                                                   std::span<const PageHash> hashes,
                                                   std::span<const int32_t> tokens,
                                                   int32_t partition) const {
  std::vector<const PrefixEntry*> hits;
  const auto per = static_cast<size_t>(page_tokens_);
  PageHash parent = root;
  for (size_t i = 0; i < hashes.size() && (i + 1) * per <= tokens.size(); ++i) {
    const PrefixEntry* e = Find(hashes[i]);
    if (e == nullptr || e->parent != parent) break;
    if (partition >= 0 && e->partition != partition) break;
    const std::span<const int32_t> page = tokens.subspan(i * per, per);
    if (!std::equal(page.begin(), page.end(), e->tokens.begin(), e->tokens.end())) {
      DSV4_LOG_DEBUG("prefix cache: page {} hash matched but its tokens differ (a collision)", i);
      break;
    }
    hits.push_back(e);
    parent = hashes[i];
  }
  return hits;
}

bool PrefixIndex::Insert(PrefixEntry entry) {
  DSV4_CHECK(entry.tokens.size() == static_cast<size_t>(page_tokens_));
  const PageHash key = entry.hash;
  return entries_.emplace(key, std::move(entry)).second;
}

void PrefixIndex::Erase(const PageHash& hash) { entries_.erase(hash); }

const PrefixEntry* PrefixIndex::Find(const PageHash& hash) const {
  auto it = entries_.find(hash);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace dsv4::cache
