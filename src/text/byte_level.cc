#include "text/byte_level.h"

#include "text/utf8.h"

namespace dsv4::text {

ByteLevelMap::ByteLevelMap() {
  // Printable Latin-1 bytes stand for themselves; the other 68 bytes are
  // numbered upward from U+0100 in byte order (GPT-2's bytes_to_unicode).
  cp_to_byte_.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    byte_to_cp_[b] = cp;
    cp_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

std::optional<std::string> ByteLevelMap::ToBytes(std::string_view s) const {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0 || n > 2) return std::nullopt;  // alphabet is U+0021..U+0143
    char32_t cp = static_cast<uint8_t>(s[i]);
    if (n == 2) cp = ((cp & 0x1F) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3F);
    if (cp >= cp_to_byte_.size() || cp_to_byte_[cp] < 0) return std::nullopt;
    out += static_cast<char>(cp_to_byte_[cp]);
    i += n;
  }
  return out;
}

std::string ByteLevelMap::FromBytes(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(out, byte_to_cp_[static_cast<uint8_t>(c)]);
  return out;
}

}  // namespace dsv4::text
