// Which cached pages hold a computed full page of some token prefix: the
// lookup side of prefix caching (docs/engine.md "Prefix caching").  Entries
// are keyed by PageHash; a lookup walks a request's page hashes from page 0
// and stops at the first page without a verified entry.  Verified means the
// entry's stored tokens equal the request's tokens of that page and its
// stored parent equals the previous page's hash, so by induction the whole
// matched prefix is token-for-token the one the pages were computed from:
// a hash collision becomes a miss, never another conversation's cache.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/prefix_hash.h"

namespace dsv4::cache {

struct PrefixEntry {
  PageHash hash;
  PageHash parent;
  int32_t partition = 0;
  std::vector<int32_t> tokens;  // the page's tokens [page_tokens]
  std::vector<int32_t> pages;   // physical page per cached group (caller's numbering)
};

class PrefixIndex {
 public:
  explicit PrefixIndex(int32_t page_tokens);

  int32_t page_tokens() const { return page_tokens_; }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }

  // The longest verified run of entries for pages 0, 1, ... of `tokens`
  // (hashes: HashFullPages of the same tokens from `root`), in `partition`
  // (or any partition when partition < 0).  Returns the entries in page
  // order; empty on a miss at page 0.
  std::vector<const PrefixEntry*> Match(const PageHash& root, std::span<const PageHash> hashes,
                                        std::span<const int32_t> tokens, int32_t partition) const;
  // Adds an entry; false (nothing changes) when its hash is taken already:
  // by another copy of the same page or by a colliding one, either way the
  // caller keeps its page unshared.  REQUIRES: tokens.size() == page_tokens.
  bool Insert(PrefixEntry entry);
  // Removes the entry of `hash` if any (its page was evicted).
  void Erase(const PageHash& hash);
  const PrefixEntry* Find(const PageHash& hash) const;

 private:
  int32_t page_tokens_;
  std::unordered_map<PageHash, PrefixEntry, PageHashHasher> entries_;
};

}  // namespace dsv4::cache
