#include "text/utf8.h"

#include <cstdint>

namespace dsv4::text {
namespace {

// Length of the longest prefix of s that is a valid (possibly incomplete)
// start of a UTF-8 sequence, and whether that prefix is a full sequence.
struct Prefix {
  size_t length;
  bool complete;
};

Prefix ValidPrefix(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return {1, true};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // excludes surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, false};
  }
  size_t i = 1;
  for (; i < need && i < s.size(); ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    const uint8_t l = (i == 1) ? lo : 0x80;
    const uint8_t h = (i == 1) ? hi : 0xBF;
    if (b < l || b > h) return {i, false};
  }
  return {i, i == need};
}

}  // namespace

size_t Utf8SequenceLength(std::string_view s) {
  if (s.empty()) return 0;
  const Prefix p = ValidPrefix(s);
  return p.complete ? p.length : 0;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path: most text is ASCII, 8 bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const Prefix p = ValidPrefix(s.substr(i));
    if (p.complete) {
      out.append(s.data() + i, p.length);
      i += p.length;
    } else {
      out += "\xEF\xBF\xBD";
      i += p.length == 0 ? 1 : p.length;  // the maximal subpart
    }
  }
  return out;
}

size_t IncompleteUtf8Suffix(std::string_view s) {
  // A sequence is at most 4 bytes, so only a lead byte among the last 3 can
  // start an incomplete one.
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const auto b = static_cast<uint8_t>(s[n - k]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking back
    const Prefix p = ValidPrefix(s.substr(n - k));
    return (!p.complete && p.length == k) ? k : 0;
  }
  return 0;
}

void AppendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace dsv4::text
