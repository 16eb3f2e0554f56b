// Content hashes of full cache pages for prefix caching.  Page i of a token
// sequence hashes its parent (page i - 1's hash, or the root for page 0),
// the salt and its tokens, so equal hashes mean equal prefixes up to a hash
// collision, which the prefix index then rules out by comparing the stored
// tokens and parent (docs/engine.md "Prefix caching").  XXH3-128 over a fixed
// little-endian byte layout: the same prefix has the same hash in every
// process and build, unlike std::hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dsv4::cache {

struct PageHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const PageHash&, const PageHash&) = default;
};

struct PageHashHasher {
  size_t operator()(const PageHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 31)); }
};

// The parent of page 0.  `salt` stands for everything besides the tokens
// that changes what a page holds (the model's weights fingerprint, the cache
// options such as K): caches built under different salts never share a page.
PageHash RootPageHash(uint64_t salt);

// The hash of one full page of `tokens` after `parent`.
PageHash HashPage(const PageHash& parent, std::span<const int32_t> tokens);

// The chain of hashes of every full page of `tokens` (pages of page_tokens),
// starting from `root`: [tokens.size() / page_tokens] hashes.
std::vector<PageHash> HashFullPages(std::span<const int32_t> tokens, int32_t page_tokens,
                                    const PageHash& root);

}  // namespace dsv4::cache
