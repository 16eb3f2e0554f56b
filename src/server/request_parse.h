// OpenAI request bodies -> engine requests.  Validation is strict where it
// helps users (wrong types, unknown fields, values the engine cannot honour
// are a 400 naming the field) and every check happens before anything is
// submitted, so a bad request never reaches the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api_error.h"
#include "server/server_options.h"
#include "text/chat_encoding.h"
#include "text/tokenizer.h"

namespace dsv4::server {

struct ParsedRequest {
  bool chat = false;
  std::vector<std::vector<int32_t>> prompts;  // chat: one; completions: one per prompt
  int64_t max_tokens = 16;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;
  engine::SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  // vLLM's: a matched stop string stays at the end of the output text.
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool echo = false;  // completions: prepend the prompt text
  // Chat only.
  text::ThinkingMode thinking_mode = text::ThinkingMode::kChat;
  bool parse_tool_calls = false;
  std::vector<std::string> tool_names;
  bool parallel_tool_calls = true;
  bool include_reasoning = true;
  // logprobs: chat `logprobs: true` + `top_logprobs`, completions `logprobs: N`.
  bool logprobs = false;
};

// Request body text -> a JSON object, in linear time and within
// options.limits (depth, members per object, elements per array); a crossed
// limit is a 400 whose param is the JSON path where it happened.
std::optional<ApiError> ParseRequestBody(std::string_view text, const ServerOptions& options,
                                         Json* body);

// Returns nullopt on success and fills *out.
std::optional<ApiError> ParseChatRequest(const Json& body, const text::Tokenizer& tokenizer,
                                         const ServerOptions& options, ParsedRequest* out);
std::optional<ApiError> ParseCompletionRequest(const Json& body, const text::Tokenizer& tokenizer,
                                               const ServerOptions& options, ParsedRequest* out);

// Chat messages (OpenAI form) -> the encoder's message list: content parts
// flattened, `reasoning` accepted as `reasoning_content`, tools attached to
// the first system message.  Validates roles, tool calls and tool results.
std::optional<ApiError> ConvertMessages(const Json& messages, const Json* tools,
                                        Json* encoder_messages, const RequestLimits& limits = {});

}  // namespace dsv4::server
