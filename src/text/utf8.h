// UTF-8 helpers shared by the tokenizer, the detokenizer and the parsers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dsv4::text {

// Length in bytes of the well-formed UTF-8 sequence starting at s[0], or 0 if
// the bytes there are not a complete well-formed sequence (Unicode Table 3-7:
// no overlongs, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(std::string_view s);

// True iff `s` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view s);

// Replaces every ill-formed subsequence with U+FFFD using the "maximal
// subpart" rule (Unicode 15 §3.9, the WHATWG decoder, Rust's
// from_utf8_lossy): each maximal prefix of a valid sequence becomes one
// U+FFFD.  Valid input is returned unchanged.
std::string SanitizeUtf8(std::string_view s);

// Number of bytes at the end of `s` that form an incomplete but so far valid
// prefix of a multi-byte sequence (0..3).  A streaming decoder holds exactly
// these bytes back; everything before them can be emitted (after sanitizing).
size_t IncompleteUtf8Suffix(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (REQUIRES: cp <= 0x10FFFF and
// not a surrogate).
void AppendUtf8(std::string& out, char32_t cp);

}  // namespace dsv4::text
