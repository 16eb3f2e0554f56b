// API key check that takes the same time whatever the client sends: a plain
// string compare returns at the first differing byte, so response times would
// tell an attacker how long a prefix of the key they guessed right.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::server {

// Equal-length buffers compared without an early exit.
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n);

class ApiKeyCheck {
 public:
  // An empty key accepts every request.
  explicit ApiKeyCheck(std::string_view key);

  bool enabled() const { return enabled_; }
  // Whether an Authorization header value is "Bearer <key>".  Both sides are
  // hashed (SHA-256) and the digests compared in constant time, so neither
  // the key's bytes nor its length show in the time taken.
  bool Matches(std::string_view authorization) const;

 private:
  bool enabled_ = false;
  std::array<uint8_t, 32> expected_{};  // SHA-256 of "Bearer <key>"
};

}  // namespace dsv4::server
