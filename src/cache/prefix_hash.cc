#include "cache/prefix_hash.h"

// The state struct on the stack (no allocation per page).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstring>

#include "base/logging.h"

namespace dsv4::cache {

namespace {

// Tag bytes keep a root and a page with coincidentally equal inputs apart.
constexpr uint64_t kRootTag = 0x64737634'726f6f74ULL;  // "dsv4root"
constexpr uint64_t kPageTag = 0x64737634'70616765ULL;  // "dsv4page"

void PutU64(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

PageHash FromXxh(const XXH128_hash_t& h) { return PageHash{h.low64, h.high64}; }

}  // namespace

PageHash RootPageHash(uint64_t salt) {
  uint8_t bytes[16];
  PutU64(bytes, kRootTag);
  PutU64(bytes + 8, salt);
  return FromXxh(XXH3_128bits(bytes, sizeof(bytes)));
}

PageHash HashPage(const PageHash& parent, std::span<const int32_t> tokens) {
  XXH3_state_t storage;
  XXH3_state_t* state = &storage;
  XXH3_INITSTATE(state);
  XXH3_128bits_reset(state);
  uint8_t head[24];
  PutU64(head, kPageTag);
  PutU64(head + 8, parent.lo);
  PutU64(head + 16, parent.hi);
  XXH3_128bits_update(state, head, sizeof(head));
  // Token ids as 4 little-endian bytes each, whatever the host's order.
  uint8_t buf[256];
  size_t n = 0;
  for (int32_t t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int i = 0; i < 4; ++i) buf[n++] = static_cast<uint8_t>(u >> (8 * i));
    if (n == sizeof(buf)) {
      XXH3_128bits_update(state, buf, n);
      n = 0;
    }
  }
  if (n > 0) XXH3_128bits_update(state, buf, n);
  return FromXxh(XXH3_128bits_digest(state));
}

std::vector<PageHash> HashFullPages(std::span<const int32_t> tokens, int32_t page_tokens,
                                    const PageHash& root) {
  DSV4_CHECK(page_tokens > 0);
  const size_t per = static_cast<size_t>(page_tokens);
  std::vector<PageHash> hashes;
  hashes.reserve(tokens.size() / per);
  PageHash parent = root;
  for (size_t begin = 0; begin + per <= tokens.size(); begin += per) {
    parent = HashPage(parent, tokens.subspan(begin, per));
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace dsv4::cache
