// Counter-based random numbers for sampling (Philox4x32-10, Salmon et al.,
// SC'11).  A request's stream is keyed by its seed and indexed by (output
// position, purpose), so a draw depends only on the request's own seed and on
// how many tokens it has produced: never on batch composition, on other
// requests, on step boundaries, on preemption (outputs are kept, so positions
// are too) or on how many draws earlier positions consumed.
#pragma once

#include <array>
#include <cstdint>

namespace dsv4::sampling {

// What a uniform at one output position is used for.  Distinct purposes give
// independent draws at the same position (speculative verification needs up
// to three per position).
enum class RngPurpose : uint32_t {
  kSample = 0,  // the committed token (plain sampling, residual or bonus)
  kAccept = 1,  // the accept test of a draft token
  kDraft = 2,   // the drafter's own sample of a draft token
};

class PhiloxRng {
 public:
  explicit PhiloxRng(uint64_t seed)
      : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)} {}

  uint64_t seed() const { return (static_cast<uint64_t>(key_[1]) << 32) | key_[0]; }

  // 128 random bits for counter (position, purpose).
  std::array<uint32_t, 4> Bits(int64_t position, RngPurpose purpose) const {
    const uint64_t pos = static_cast<uint64_t>(position);
    return Block({static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32),
                  static_cast<uint32_t>(purpose), 0u},
                 key_);
  }

  // The raw Philox4x32-10 bijection (exposed for known-answer tests).
  static std::array<uint32_t, 4> Block(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        key[0] += kWeyl0;
        key[1] += kWeyl1;
      }
      ctr = Round(ctr, key);
    }
    return ctr;
  }

  // Uniform in [0, 1) with 53 random bits (every value is a multiple of 2^-53).
  double Uniform(int64_t position, RngPurpose purpose) const {
    const std::array<uint32_t, 4> r = Bits(position, purpose);
    const uint64_t bits = ((static_cast<uint64_t>(r[0]) << 32) | r[1]) >> 11;
    return static_cast<double>(bits) * 0x1.0p-53;
  }

 private:
  static constexpr uint32_t kMul0 = 0xD2511F53u;
  static constexpr uint32_t kMul1 = 0xCD9E8D57u;
  static constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  static constexpr uint32_t kWeyl1 = 0xBB67AE85u;

  static std::array<uint32_t, 4> Round(const std::array<uint32_t, 4>& c,
                                       const std::array<uint32_t, 2>& k) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32);
    const uint32_t lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32);
    const uint32_t lo1 = static_cast<uint32_t>(p1);
    return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }

  std::array<uint32_t, 2> key_;
};

// Seed of a request that gave none: a SplitMix64 mix of an engine-wide base
// seed and the request id, so unseeded requests get distinct streams.
inline uint64_t DeriveRequestSeed(uint64_t engine_seed, int64_t request_id) {
  uint64_t z = engine_seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(request_id) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace dsv4::sampling
