// Hugging Face tokenizer.json (byte-level BPE, as shipped with DeepSeek-V4).
//
// Supported configuration (anything else is rejected at Load with a message
// naming the field): normalizer null or an empty Sequence; pre_tokenizer a
// Sequence of Split steps (behaviour Isolated, invert false) followed by a
// ByteLevel step with use_regex=false and add_prefix_space=false (or a lone
// ByteLevel step, or a lone Split); model BPE without dropout, unk token,
// byte fallback, subword prefix or word suffix; decoder ByteLevel (or null).
// Post-processors only affect offsets here and are ignored: like the
// reference, Encode adds no BOS (docs/text.md "Tokenizer").
//
// Invalid UTF-8 policy (docs/text.md): Encode is total and lossless — invalid
// bytes never match an added token or a split regex and are encoded byte by
// byte — so DecodeBytes(Encode(x)) == x for every byte string x.  Decode
// returns valid UTF-8: ill-formed sequences become U+FFFD ("maximal
// subpart"), as in HF's from_utf8_lossy; for valid x, Decode(Encode(x)) == x.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/added_tokens.h"

namespace dsv4::text {

class BpeModel;
class RegexSplitter;

class Tokenizer {
 public:
  // Loads tokenizer.json.  `overlay_path` (optional) names a JSON file of
  // added tokens that replace or extend the file's table, in either form:
  //   {"added_tokens": [{"id", "content", "special", ...}, ...]}   (HF form)
  //   {"confirmed_v4": {content: id, ...},
  //    "confirmed_special_flag": {"true": [ids...]}}   (v4_known_added_tokens.json)
  // An overlay token replaces any added token with the same id or content.
  static Result<std::unique_ptr<Tokenizer>> Load(const std::string& path,
                                                 const std::string& overlay_path = "");
  static Result<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                     std::string_view overlay_json = "");
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text -> ids, with no BOS/EOS added.  Thread-safe.
  std::vector<int32_t> Encode(std::string_view text) const;

  // Ids -> text (valid UTF-8).  With skip_special, tokens flagged special
  // (BOS, EOS, pad, <｜image｜> ...) are dropped; <think>, ｜DSML｜ etc. stay.
  // Ids outside the table decode to nothing (see IsKnown).
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The exact bytes, no UTF-8 repair.
  std::string DecodeBytes(std::span<const int32_t> ids, bool skip_special = false) const;

  // Id of an added token by content (e.g. "<｜User｜>"), else of a base
  // vocabulary entry by its tokenizer.json spelling (e.g. "Ġthe").
  std::optional<int32_t> TokenId(std::string_view token) const;

  // Raw bytes token `id` decodes to (empty for unknown ids).
  const std::string& TokenBytes(int32_t id) const;
  bool IsKnown(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  bool IsAdded(int32_t id) const;
  // 1 + the largest id (base vocabulary or added).
  int32_t vocab_size() const { return static_cast<int32_t>(id_bytes_.size()); }
  int32_t num_base_tokens() const;

 private:
  Tokenizer();
  void EncodeText(std::string_view text, std::vector<int32_t>& out) const;

  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<RegexSplitter> splitter_;
  std::unique_ptr<AddedTokenMatcher> added_;
  std::vector<AddedToken> added_tokens_;
  std::vector<std::string> id_bytes_;  // [vocab_size] decoded bytes per id
  std::vector<uint8_t> id_flags_;      // [vocab_size] kKnown | kSpecial | kAdded
};

}  // namespace dsv4::text
