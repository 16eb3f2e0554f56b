// One choice of one request, on the server side: engine token ids ->
// content / reasoning_content / tool-call deltas (chat, via text::OutputParser)
// or plain text (completions, via the incremental detokenizer), stop strings,
// finish reason and usage counts.  Lives on the request's handler thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/request_parse.h"
#include "server/stop_matcher.h"
#include "text/detokenizer.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"

namespace dsv4::server {

struct ToolCallChunk {
  int index = 0;
  std::string id;    // first chunk of a call only
  std::string name;  // first chunk of a call only
  std::string arguments;
};

struct ChoiceDelta {
  std::string reasoning_content;
  std::string content;  // chat content, or completion text
  std::vector<ToolCallChunk> tool_calls;
  std::vector<engine::TokenLogprob> logprobs;
  bool empty() const {
    return reasoning_content.empty() && content.empty() && tool_calls.empty() && logprobs.empty();
  }
};

struct ToolCallResult {
  std::string id;
  std::string name;
  std::string arguments;
};

class ChoiceDecoder {
 public:
  // REQUIRES: `tokenizer` and `request` outlive the decoder.
  static Result<std::unique_ptr<ChoiceDecoder>> Create(const ParsedRequest& request,
                                                       const text::Tokenizer& tokenizer);

  // Consumes one engine output.  After finished() turns true further outputs
  // are ignored; when it turned true because of a stop string or malformed
  // model output, needs_abort() says the engine request must be aborted.
  ChoiceDelta Push(const engine::GenerationOutput& output);

  bool finished() const { return !finish_reason_.empty(); }
  bool needs_abort() const { return needs_abort_; }
  const std::string& finish_reason() const { return finish_reason_; }
  const Status& error() const { return error_; }  // malformed model output
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_reasoning_tokens() const { return num_reasoning_tokens_; }

  // The whole result so far (for non-streaming responses).
  const std::string& reasoning_content() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCallResult>& tool_calls() const { return calls_; }
  const std::vector<engine::TokenLogprob>& logprobs() const { return logprobs_; }

 private:
  explicit ChoiceDecoder(const ParsedRequest& request);
  // searched = false: text of the first min_tokens tokens (never a stop).
  void AddParserDelta(const text::ParserDelta& d, ChoiceDelta* out, bool searched = true);
  void AddText(std::string_view text, ChoiceDelta* out, bool searched = true);
  void Finish(const engine::GenerationOutput& output, ChoiceDelta* out);
  void CountReasoning(std::span<const int32_t> ids);

  const ParsedRequest& request_;
  std::optional<text::OutputParser> parser_;           // chat
  std::optional<text::IncrementalDetokenizer> detok_;  // completions
  StopMatcher stop_;
  int32_t think_end_id_ = -1;
  int32_t dsml_id_ = -1;
  bool in_reasoning_ = false;
  std::string finish_reason_;
  bool needs_abort_ = false;
  Status error_;
  int64_t num_tokens_ = 0;
  int64_t num_reasoning_tokens_ = 0;
  std::string reasoning_, content_;
  std::vector<ToolCallResult> calls_;
  std::vector<engine::TokenLogprob> logprobs_;
};

// "call_" + 24 random hex digits.
std::string NewToolCallId();

}  // namespace dsv4::server
