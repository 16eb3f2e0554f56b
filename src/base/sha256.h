// SHA-256 (FIPS 180-4) for source fingerprints: the converter hashes every
// source byte (docs/convert.md), the prepacked sidecar its source description
// (docs/prepack.md).  Dependency-free: the x86 SHA extensions when the CPU has
// them (several times faster), else portable code; both give the same digest
// (tested in tests/tools/convert_numerics_test.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4 {

class Sha256 {
 public:
  // use_sha_ni = false forces the portable code (tests).
  explicit Sha256(bool use_sha_ni = true);
  void Update(const void* data, size_t size);
  // The digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> Finish();
  // Finish() as 64 lowercase hex digits.
  std::string FinishHex();

  static std::string HexOf(std::string_view bytes);
  // Whether this CPU has the SHA extensions (and SSE4.1).
  static bool CpuHasShaNi();

 private:
  void Blocks(const uint8_t* p, size_t count);
  void Block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  bool sha_ni_ = false;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

}  // namespace dsv4
