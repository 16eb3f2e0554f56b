#include "server/api_key.h"

#include "base/sha256.h"

namespace dsv4::server {
namespace {

std::array<uint8_t, 32> Digest(std::string_view a, std::string_view b = {}) {
  Sha256 h;
  for (std::string_view part : {a, b}) {
    if (!part.empty()) h.Update(part.data(), part.size());  // an empty view's data() may be null
  }
  return h.Finish();
}

}  // namespace

bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  // volatile: the compiler may not turn the loop into an early-exit compare.
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff = diff | static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

ApiKeyCheck::ApiKeyCheck(std::string_view key) : enabled_(!key.empty()) {
  if (enabled_) expected_ = Digest("Bearer ", key);
}

bool ApiKeyCheck::Matches(std::string_view authorization) const {
  if (!enabled_) return true;
  const std::array<uint8_t, 32> got = Digest(authorization);
  return ConstantTimeEqual(got.data(), expected_.data(), got.size());
}

}  // namespace dsv4::server
