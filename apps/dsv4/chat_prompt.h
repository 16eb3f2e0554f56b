// Chat prompts of `dsv4 generate` (docs/sampling.md §5): `--chat` texts and
// `--chat-request` files become the server's ParsedRequest through the
// server's own ParseRequestBody + ParseChatRequest, so validation, thinking
// selection, tool handling and the V4 encoding are exactly those of
// `dsv4 serve`.  `--generate-config` supplies the fields a request leaves out.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "generate_config.h"
#include "server/request_parse.h"
#include "server/server_options.h"
#include "text/tokenizer.h"

namespace dsv4::cli {

// The generate config as chat request fields (the server's names), only
// those that differ from GenerateConfig's defaults (temperature, top_p,
// top_k, min_p, seed, the penalties, stop, stop_token_ids, logprobs +
// top_logprobs, ignore_eos, reasoning_effort) and always max_tokens =
// max_new_tokens (the server's chat default, the rest of the context, is not
// generate's).  "thinking" is
// not a field here: it is ServerOptions::default_thinking, as `serve
// --default-thinking`.
server::Json ChatDefaults(const GenerateConfig& config);

// `body` with each field of `defaults` added where the body says nothing.
// Related fields go as a group, so a default never contradicts what the
// body chose: {max_tokens, max_completion_tokens}, {logprobs, top_logprobs},
// {reasoning_effort, thinking, chat_template_kwargs}.
// REQUIRES: body and defaults are JSON objects.
server::Json WithDefaults(server::Json body, const server::Json& defaults);

// One --chat text as {"messages": [{"role": "user", "content": text}]} plus
// the defaults, parsed as the server parses it.
Result<server::ParsedRequest> ChatTextRequest(const std::string& prompt,
                                              const GenerateConfig& config,
                                              const text::Tokenizer& tokenizer,
                                              const server::ServerOptions& options);

// A chat-completions request body (JSON text) plus the defaults, parsed as
// the server parses it.  Fields that belong to the HTTP exchange and not to
// one offline answer are refused: "stream": true (the generate config's
// "stream" does that) and "n" > 1.
Result<server::ParsedRequest> ChatBodyRequest(std::string_view body_text,
                                              const GenerateConfig& config,
                                              const text::Tokenizer& tokenizer,
                                              const server::ServerOptions& options);

// Reads `path` (at most options.max_body_bytes, as the server's request
// limit) and parses it with ChatBodyRequest; every error is one line
// beginning "--chat-request PATH: ".
Result<server::ParsedRequest> LoadChatRequest(const std::string& path, const GenerateConfig& config,
                                              const text::Tokenizer& tokenizer,
                                              const server::ServerOptions& options);

}  // namespace dsv4::cli
