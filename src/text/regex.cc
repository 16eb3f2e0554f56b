#include "text/regex.h"

#include "text/unicode_delta.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace dsv4::text {

namespace {
// Unicode White_Space (Oniguruma's \s for UTF-8), as class members.
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";
std::string_view UnicodeDelta(char category) {
  switch (category) {
    case 'L':
      return kUnicodeDeltaL;
    case 'M':
      return kUnicodeDeltaM;
    case 'P':
      return kUnicodeDeltaP;
    case 'S':
      return kUnicodeDeltaS;
    default:
      return {};
  }
}

}  // namespace

std::string OnigurumaToPcre2(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if ((e == 'p' || e == 'P') && pattern.substr(i + 1, 3).size() == 3 && pattern[i + 1] == '{' &&
          pattern[i + 3] == '}') {
        // \p{L} etc.: add what Oniguruma's newer Unicode knows and PCRE2's does not.
        std::string_view delta = UnicodeDelta(pattern[i + 2]);
        if (!delta.empty() && (e == 'p' || !in_class)) {
          const std::string prop = "\\p{" + std::string(1, pattern[i + 2]) + "}";
          out += in_class ? prop + std::string(delta)
                          : (e == 'p' ? "[" : "[^") + prop + std::string(delta) + "]";
          i += 3;
          continue;
        }
      }
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after '[' is a literal member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::MatchData::MatchData(const Regex& re)
    : md_(pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(re.code_), nullptr)) {}

Regex::MatchData::~MatchData() { pcre2_match_data_free(static_cast<pcre2_match_data*>(md_)); }

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Result<std::unique_ptr<Regex>> Regex::Compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument("regex /{}/ does not compile at offset {}: {}", pattern, error_offset,
                           reinterpret_cast<const char*>(message));
  }
  std::unique_ptr<Regex> re(new Regex());
  re->code_ = code;
  // Without JIT (unsupported CPU) the interpreter gives the same matches, slower.
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

bool Regex::Find(std::string_view subject, size_t offset, MatchData& md, size_t* begin,
                 size_t* end) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* data = static_cast<pcre2_match_data*>(md.md_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = jit_ ? pcre2_jit_match(code, s, subject.size(), offset, 0, data, nullptr)
                      : pcre2_match(code, s, subject.size(), offset, 0, data, nullptr);
  if (rc < 0) return false;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace dsv4::text
