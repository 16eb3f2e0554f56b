// The GPT-2 "ByteLevel" byte <-> unicode map used by HF byte-level BPE.
//
// tokenizer.json stores vocabulary and merges as strings over a 256-character
// alphabet in which every byte is a printable code point.  We convert them to
// raw bytes once at load, so encoding never builds those strings.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dsv4::text {

class ByteLevelMap {
 public:
  ByteLevelMap();

  // The code point that stands for `byte`.
  char32_t CodePoint(uint8_t byte) const { return byte_to_cp_[byte]; }

  // Maps a byte-level string back to raw bytes; nullopt if some character is
  // not in the alphabet (HF then keeps the token's own UTF-8 bytes).
  std::optional<std::string> ToBytes(std::string_view byte_level) const;

  // Raw bytes -> byte-level string (for diagnostics and TokenId lookups).
  std::string FromBytes(std::string_view bytes) const;

 private:
  std::array<char32_t, 256> byte_to_cp_{};
  std::array<int16_t, 324> cp_to_byte_{};  // the alphabet lies in U+0021..U+0143
};

}  // namespace dsv4::text
