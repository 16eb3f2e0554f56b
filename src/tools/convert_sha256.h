// SHA-256 (FIPS 180-4) for the converter's source fingerprints.  Small and
// dependency-free; throughput (~300 MB/s) only matters when a source shard
// must be re-hashed, which the marker avoids unless the file changed (docs/convert.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::tools {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  // The digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> Finish();
  // Finish() as 64 lowercase hex digits.
  std::string FinishHex();

  static std::string HexOf(std::string_view bytes);

 private:
  void Block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

}  // namespace dsv4::tools
