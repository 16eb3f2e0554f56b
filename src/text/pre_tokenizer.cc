#include "text/pre_tokenizer.h"

namespace dsv4::text {

Result<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(
    const std::vector<std::string>& patterns) {
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  for (const std::string& pattern : patterns) {
    auto re = Regex::Compile(OnigurumaToPcre2(pattern));
    if (!re.ok()) return re.status().WithPrefix("tokenizer: pre-tokenizer Split");
    s->steps_.push_back(std::move(re).value());
  }
  return s;
}

}  // namespace dsv4::text
