// OpenAI response bodies and SSE chunks (chat.completion, text_completion,
// their .chunk forms, usage, logprobs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/choice_decoder.h"
#include "server/generation.h"
#include "text/tokenizer.h"

namespace dsv4::server {

struct ResponseHeader {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
};

ResponseHeader NewHeader(bool chat, const std::string& model);

Json UsageJson(const Generation& gen);
Json ChatLogprobs(const std::vector<engine::TokenLogprob>& lps, const text::Tokenizer& tok);
// `text_offset` continues from *offset (advanced by each token's text).
Json CompletionLogprobs(const std::vector<engine::TokenLogprob>& lps, const text::Tokenizer& tok,
                        size_t* offset);

// Whole responses (non-streaming).
Json ChatResponse(const ResponseHeader& h, const Generation& gen, const text::Tokenizer& tok);
Json CompletionResponse(const ResponseHeader& h, const Generation& gen, const text::Tokenizer& tok);

// Streaming chunks (the JSON after "data: ").
Json ChatRoleChunk(const ResponseHeader& h, int index);
// Null when the delta carries nothing.
Json ChatDeltaChunk(const ResponseHeader& h, int index, const ChoiceDelta& d,
                    const text::Tokenizer& tok);
Json ChatFinishChunk(const ResponseHeader& h, int index, const std::string& finish_reason);
Json CompletionChunk(const ResponseHeader& h, int index, const ChoiceDelta& d,
                     const std::string& finish_reason, const text::Tokenizer& tok, size_t* offset);
Json UsageChunk(const ResponseHeader& h, bool chat, const Generation& gen);

std::string Dump(const Json& j);
std::string SseEvent(const Json& j);

}  // namespace dsv4::server
