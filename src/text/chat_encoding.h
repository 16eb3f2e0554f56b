// DeepSeek-V4-Flash prompt encoding: a C++ port of the semantics of the
// official encoding/encoding_dsv4.py `encode_messages` (docs/text.md "The V4 chat format"),
// byte-exact on the official fixtures.
//
// Messages are OpenAI-style JSON objects: role (system | user | developer |
// assistant | tool | latest_reminder), content, reasoning_content,
// tool_calls [{id, type, function: {name, arguments}}], tool_call_id, tools
// [{type, function}], response_format, task, wo_eos, mask.  They must be
// parsed as OrderedJson so tool schemas keep their key order (Python dicts
// do; nlohmann::json would sort keys and change the prompt).
//
// Every input the reference rejects (AssertionError, ValueError, KeyError,
// TypeError, ...) is an InvalidArgument here.  Where the reference would
// render a Python repr() of a list or dict (e.g. dict-valued tool content) we
// reject instead; see docs/text.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "text/py_json.h"

namespace dsv4::text {

enum class ThinkingMode { kChat, kThinking };

// "chat" | "thinking"; anything else is an error (as in the reference).
Result<ThinkingMode> ParseThinkingMode(std::string_view s);

struct EncodeOptions {
  ThinkingMode thinking_mode = ThinkingMode::kChat;
  // nullopt, "high" or "max" (V4-Flash).  Only "max" adds text, and only in
  // thinking mode.  Validated when the first message is rendered, as in the
  // reference.
  std::optional<std::string> reasoning_effort;
  bool drop_thinking = true;
  bool add_default_bos_token = true;
  // Earlier messages already in the KV cache: they take part in the
  // last-user, drop and sort decisions but are not rendered.  Null or array.
  OrderedJson context;
};

// REQUIRES nothing of `messages`: any JSON is accepted and validated.
Result<std::string> EncodeMessages(const OrderedJson& messages, const EncodeOptions& options);

// How an OpenAI-style `reasoning_effort` maps onto the V4-Flash encoder
// (docs/text.md): "none" forces chat mode; minimal / low / medium give no
// effort text (nullopt); "high" stays "high" (also no text); xhigh / max /
// ultra -> "max".  Other values are an error.
struct MappedEffort {
  bool force_chat = false;
  std::optional<std::string> effort;
};
Result<MappedEffort> MapOpenAiReasoningEffort(std::string_view value);

}  // namespace dsv4::text
