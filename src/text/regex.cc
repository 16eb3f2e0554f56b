#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace dsv4::text {

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
