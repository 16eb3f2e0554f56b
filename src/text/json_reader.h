// JSON text -> OrderedJson for untrusted input, in time linear in its size and
// within stated limits.
//
// Why not OrderedJson::parse: (1) its objects insert each key through
// ordered_map's linear search, so an object with n members costs O(n^2)
// (100k keys: 24 s); (2) a growing ordered_map copies its members (its
// pair<const string, json> cannot be moved without a throwing key copy), each
// a recursive deep copy, so a deep member followed by a sibling key overflows
// the stack inside parse itself; (3) it accepts any depth, and everything that
// later walks the value recursively (nlohmann's copy, dump and ==) can then
// overflow the stack.  ReadJson builds the same value (same key order; a duplicate key keeps
// its first position and takes the last value, as nlohmann and Python's dict
// do) through nlohmann's iterative SAX parser, collects each object's members
// in a plain vector and moves them into the object once, finds duplicates
// through a hash index once an object grows past a few members, and stops at
// the first limit it crosses, before building anything below it.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "text/py_json.h"

namespace dsv4::text {

struct JsonLimits {
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  size_t max_depth = kNone;           // open objects/arrays at once ({"a":[1]} is 2)
  size_t max_object_members = kNone;  // per object
  size_t max_array_elements = kNone;  // per array
  size_t max_string_bytes = kNone;    // per string or key
};

struct JsonReadError {
  bool limit = false;  // a limit was crossed (else the text is not JSON)
  // Where, as a JSON path from the document's root: "messages[2].content";
  // empty for the root itself.  Only the first kJsonPathSegments steps are
  // kept; a longer path ends in "...".
  std::string path;
  std::string message;  // "JSON nested deeper than 128 levels", "syntax error ..."
};

inline constexpr size_t kJsonPathSegments = 8;

// Parses `text` (one JSON value, RFC 8259, UTF-8) into *out.  On an error *out
// is left null.
std::optional<JsonReadError> ReadJson(std::string_view text, const JsonLimits& limits,
                                      OrderedJson* out);

// base + tail as one path: ("a", "b") -> "a.b", ("a", "[0].b") -> "a[0].b",
// ("", "b") -> "b", ("a", "") -> "a".
std::string JoinJsonPath(std::string_view base, std::string_view tail);

}  // namespace dsv4::text
