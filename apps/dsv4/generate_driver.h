// Drives prompts through an AsyncEngine for `dsv4 generate`: submits them
// all at once (continuous batching does the rest), follows every output on
// the calling thread, matches stop strings after each committed token and
// aborts a request whose stop string appeared.  Chat prompts go through the
// server's ChoiceDecoder (reasoning, content, tool calls, finish reason as
// `dsv4 serve` reports them).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/async_engine.h"
#include "generate_config.h"
#include "server/choice_decoder.h"
#include "server/request_parse.h"
#include "text/tokenizer.h"

namespace dsv4::cli {

struct GeneratePrompt {
  std::vector<int32_t> ids;
  // Chat prompts (--chat, --chat-request): the request as the server parsed
  // it.  Its max_tokens, sampling, stop strings and stop ids replace the
  // generate config's, and its output is decoded by server::ChoiceDecoder.
  std::optional<server::ParsedRequest> chat;
  std::string label;  // shown in the prompt's header, e.g. the request file
};

struct PromptResult {
  std::vector<int32_t> tokens;                 // through the token that completed a stop string
  std::vector<engine::TokenLogprob> logprobs;  // aligned with tokens when requested
  // Plain prompts: stop string removed, empty without tokenizer.  Chat
  // prompts: the decoded output with special tokens (shown on a parse error).
  std::string text;
  // Plain prompts: eos | stop | length | aborted | error.  Chat prompts: the
  // server's finish_reason: stop | tool_calls | length | aborted | error.
  std::string finish;
  Status error;  // with finish == "error"
  // Chat prompts only: the server's message fields.
  std::string reasoning_content;
  std::string content;
  std::vector<server::ToolCallResult> tool_calls;
};

struct GenerateStats {
  double seconds = 0;  // first submission to the last final output
  int64_t num_tokens = 0;
  int64_t num_verify_steps = 0;  // steps that carried drafts
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
};

struct GenerateJob {
  std::vector<GeneratePrompt> prompts;
  GenerateConfig config;
  // null: no text, no stop strings, no chat prompts.
  const text::Tokenizer* tokenizer = nullptr;
  int32_t eos_token_id = 1;
  // stream=true: text deltas of the one prompt (a chat prompt's with
  // "reasoning: " / "content: " / "tool_call: NAME " before each section).
  std::ostream* stream = nullptr;
};

// InvalidArgument when the engine refuses a request at submission (the
// requests submitted before it are aborted and awaited) or a chat prompt has
// no tokenizer.
Result<std::vector<PromptResult>> RunGenerate(engine::AsyncEngine& engine, const GenerateJob& job,
                                              GenerateStats* stats);

}  // namespace dsv4::cli
