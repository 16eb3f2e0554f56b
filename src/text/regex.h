// A compiled PCRE2 regex (UTF + UCP, JIT when available) over UTF-8 bytes.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4::text {

// Rewrites an Oniguruma (HF) pattern so PCRE2 matches what HF matches:
// - PCRE2's Unicode \s also matches U+180E (Mongolian vowel separator, a
//   space before Unicode 6.3); Oniguruma's \s is exactly White_Space.  \s and
//   \S become explicit White_Space classes.
// - PCRE2 10.42 has Unicode 14.0 tables, HF's Oniguruma a newer Unicode:
//   \p{L}, \p{M}, \p{P}, \p{S} (and \P{..} outside classes) gain the
//   characters assigned since (unicode_delta.h).
// Everything else is copied.  (\S and \P{..} inside a class have no class
// form and are kept.)
std::string OnigurumaToPcre2(std::string_view pattern);

class Regex {
 public:
  // Per-call match state; one per thread (a Regex itself is immutable).
  class MatchData {
   public:
    explicit MatchData(const Regex& re);
    ~MatchData();
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;

   private:
    friend class Regex;
    void* md_;
  };

  // UCP makes \s, \w and \d Unicode-aware, as in Oniguruma (HF's engine).
  // Invalid UTF-8 in a subject never matches (PCRE2_MATCH_INVALID_UTF).
  static Result<std::unique_ptr<Regex>> Compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // First match in subject at or after `offset`.  False when there is none —
  // or when PCRE2 hits a resource limit, which callers treat the same way.
  bool Find(std::string_view subject, size_t offset, MatchData& md, size_t* begin,
            size_t* end) const;

 private:
  Regex() = default;
  void* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace dsv4::text
