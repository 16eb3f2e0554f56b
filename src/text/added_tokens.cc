#include "text/added_tokens.h"

#include <algorithm>

#include "text/utf8.h"

namespace dsv4::text {

AddedTokenMatcher::Trie::Trie() { nodes_.emplace_back(); }

void AddedTokenMatcher::Trie::Insert(std::string_view key, int32_t token_index) {
  first_byte_[static_cast<uint8_t>(key[0])] = true;
  int32_t node = 0;
  for (char c : key) {
    const auto b = static_cast<uint8_t>(c);
    auto& ch = nodes_[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, INT32_MIN));
    if (it != ch.end() && it->first == b) {
      node = it->second;
    } else {
      const auto next = static_cast<int32_t>(nodes_.size());
      ch.insert(it, {b, next});
      nodes_.emplace_back();
      node = next;
    }
  }
  nodes_[node].token_index = token_index;
}

size_t AddedTokenMatcher::Trie::LongestAt(std::string_view text, size_t pos,
                                          int32_t* token_index) const {
  if (!first_byte_[static_cast<uint8_t>(text[pos])]) return 0;
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& ch = nodes_[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, INT32_MIN));
    if (it == ch.end() || it->first != b) break;
    node = it->second;
    if (nodes_[node].token_index >= 0) {
      best = i + 1 - pos;
      *token_index = nodes_[node].token_index;
    }
  }
  return best;
}

Result<std::unique_ptr<AddedTokenMatcher>> AddedTokenMatcher::Create(
    const std::vector<AddedToken>& tokens) {
  std::unique_ptr<AddedTokenMatcher> m(new AddedTokenMatcher());
  m->tokens_ = tokens;
  bool needs_classes = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const AddedToken& t = tokens[i];
    if (t.content.empty())
      return InvalidArgument("tokenizer: added token {} has empty content", t.id);
    (t.normalized ? m->normalized_ : m->raw_).Insert(t.content, static_cast<int32_t>(i));
    needs_classes |= t.lstrip || t.rstrip || t.single_word;
  }
  if (needs_classes) {
    DSV4_ASSIGN_OR_RETURN(m->word_char_, Regex::Compile("\\w"));
    DSV4_ASSIGN_OR_RETURN(m->space_char_, Regex::Compile(OnigurumaToPcre2("\\s")));
  }
  return m;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  if (raw_.empty() && normalized_.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  std::vector<Segment> first;
  SplitWith(raw_, text, 0, first);
  for (const Segment& s : first) {
    if (s.id >= 0 || normalized_.empty()) {
      out.push_back(s);
    } else {
      SplitWith(normalized_, text.substr(s.begin, s.end - s.begin), s.begin, out);
    }
  }
}

void AddedTokenMatcher::SplitWith(const Trie& trie, std::string_view text, size_t base,
                                  std::vector<Segment>& out) const {
  size_t text_start = 0;  // start of pending unmatched text
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t index = -1;
    const size_t len = trie.LongestAt(text, pos, &index);
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[index];
    size_t start = pos, stop = pos + len;
    if (t.single_word && (WordCharBefore(text, start) || WordCharAfter(text, stop))) {
      pos = stop;  // HF skips the match and resumes after it
      continue;
    }
    if (t.lstrip) start -= SpacesBefore(text, start, text_start);
    if (t.rstrip) stop += SpacesAfter(text, stop);
    if (start > text_start) out.push_back({base + text_start, base + start, -1});
    out.push_back({base + start, base + stop, t.id});
    text_start = pos = stop;
  }
  if (text_start < text.size()) out.push_back({base + text_start, base + text.size(), -1});
}

namespace {

// Start of the code point that ends at byte `pos` (exclusive).
size_t PrevCharStart(std::string_view text, size_t pos) {
  size_t i = pos - 1;
  while (i > 0 && pos - i < 4 && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool MatchesAt(const Regex& re, std::string_view text, size_t pos) {
  if (pos >= text.size()) return false;
  size_t n = Utf8SequenceLength(text.substr(pos));
  if (n == 0) return false;
  Regex::MatchData md(re);
  size_t b = 0, e = 0;
  return re.Find(text.substr(pos, n), 0, md, &b, &e);
}

}  // namespace

bool AddedTokenMatcher::WordCharBefore(std::string_view text, size_t pos) const {
  return pos > 0 && MatchesAt(*word_char_, text, PrevCharStart(text, pos));
}

bool AddedTokenMatcher::WordCharAfter(std::string_view text, size_t pos) const {
  return MatchesAt(*word_char_, text, pos);
}

size_t AddedTokenMatcher::SpacesBefore(std::string_view text, size_t pos, size_t floor) const {
  size_t start = pos;
  while (start > floor) {
    const size_t prev = PrevCharStart(text, start);
    if (prev < floor || !MatchesAt(*space_char_, text, prev)) break;
    start = prev;
  }
  return pos - start;
}

size_t AddedTokenMatcher::SpacesAfter(std::string_view text, size_t pos) const {
  size_t stop = pos;
  while (MatchesAt(*space_char_, text, stop)) stop += Utf8SequenceLength(text.substr(stop));
  return stop - pos;
}

}  // namespace dsv4::text
