// `dsv4 tokenize`: JSONL training documents -> a flat token file, encoded
// exactly as the server encodes requests (docs/training-data.md).
//
// Each line is one JSON object, either
//   {"text": "..."}                                  a prose document:
//       BOS + Encode(text) + EOS
//   {"messages": [...], "tools": [...], "thinking": true|false}
//       a conversation, read as a chat-completions request body by the
//       server's own parser (server::ParseChatRequest: message conversion,
//       tool normalisation, the V4 chat encoder, the tokenizer).  The last
//       message must be the assistant's answer: the encoder renders it with
//       its EOS, so the ids are the prompt followed by exactly what the model
//       must generate.  "tools" and "thinking" are optional (absent thinking
//       means chat mode, the server's default).
// Blank lines are errors, as is any other key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/tokenizer.h"

namespace dsv4::cli {

// Appends the ids of one JSONL line to *ids.  Errors are InvalidArgument and
// do not name the line (the caller adds it).
Status EncodeTrainingLine(std::string_view line, const text::Tokenizer& tokenizer,
                          std::vector<int32_t>* ids, bool* is_chat);

struct TokenizeStats {
  int64_t num_texts = 0;
  int64_t num_chats = 0;
  int64_t num_tokens = 0;
  std::string dtype;  // "uint16" (vocab <= 65536) or "uint32"
};

// Encodes every line of `input` and writes the ids, little-endian, as
// `output` (written under a temporary name and renamed at the end, so a
// failed run leaves no partial file) plus `output`.json, a sidecar with the
// dtype, vocabulary size and counts.  A bad line fails the whole run with
// "INPUT:LINE: message".
Result<TokenizeStats> TokenizeJsonl(const std::string& input, const std::string& output,
                                    const text::Tokenizer& tokenizer);

}  // namespace dsv4::cli
