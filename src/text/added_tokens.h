// Added tokens (HF AddedVocabulary): matched in the raw text before
// pre-tokenization, leftmost-longest, whatever their `special` flag.
//
// As in HF, tokens with normalized=false are split out first; tokens with
// normalized=true are then matched inside the remaining text (there is no
// normalizer in DeepSeek's files, so normalized text = raw text).  lstrip /
// rstrip absorb adjacent whitespace into the token; single_word only accepts
// a match not touching word characters.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/regex.h"

namespace dsv4::text {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A piece of the input: a byte range that is either an added token (id >= 0)
// or text still to be pre-tokenized (id == -1).
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  static Result<std::unique_ptr<AddedTokenMatcher>> Create(const std::vector<AddedToken>& tokens);

  // Splits `text` into segments covering it in order.  Thread-safe.
  void Split(std::string_view text, std::vector<Segment>& out) const;

 private:
  // A byte trie over one set of token contents.
  class Trie {
   public:
    Trie();
    void Insert(std::string_view key, int32_t token_index);
    // Longest key starting at text[pos]: its length, or 0; *token_index set.
    size_t LongestAt(std::string_view text, size_t pos, int32_t* token_index) const;
    bool empty() const { return nodes_.size() == 1; }

   private:
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token_index = -1;
    };
    std::vector<Node> nodes_;
    std::array<bool, 256> first_byte_{};
  };

  AddedTokenMatcher() = default;
  void SplitWith(const Trie& trie, std::string_view text, size_t base,
                 std::vector<Segment>& out) const;
  bool WordCharBefore(std::string_view text, size_t pos) const;
  bool WordCharAfter(std::string_view text, size_t pos) const;
  size_t SpacesBefore(std::string_view text, size_t pos, size_t floor) const;
  size_t SpacesAfter(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  Trie raw_;                           // normalized == false
  Trie normalized_;                    // normalized == true
  std::unique_ptr<Regex> word_char_;   // \w
  std::unique_ptr<Regex> space_char_;  // \s
};

}  // namespace dsv4::text
