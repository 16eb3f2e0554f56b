#include "server/request_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "text/json_reader.h"

namespace dsv4::server {
namespace {

using Err = std::optional<ApiError>;

const std::set<std::string> kCommonFields = {"model",
                                             "max_tokens",
                                             "temperature",
                                             "top_p",
                                             "top_k",
                                             "min_p",
                                             "seed",
                                             "presence_penalty",
                                             "frequency_penalty",
                                             "repetition_penalty",
                                             "stop",
                                             "stop_token_ids",
                                             "stream",
                                             "stream_options",
                                             "n",
                                             "logprobs",
                                             "ignore_eos",
                                             "min_tokens",
                                             "include_stop_str_in_output",
                                             "user",
                                             "skip_special_tokens",
                                             "logit_bias"};
const std::set<std::string> kChatFields = {"messages",
                                           "max_completion_tokens",
                                           "top_logprobs",
                                           "tools",
                                           "tool_choice",
                                           "parallel_tool_calls",
                                           "reasoning_effort",
                                           "chat_template_kwargs",
                                           "include_reasoning",
                                           "thinking",
                                           "response_format",
                                           "metadata",
                                           "store"};
const std::set<std::string> kCompletionFields = {"prompt", "echo", "best_of", "suffix"};

std::string TypeName(const Json& v) { return v.type_name(); }

text::JsonLimits JsonLimitsFor(const RequestLimits& limits) {
  text::JsonLimits j;
  j.max_depth = static_cast<size_t>(limits.max_json_depth);
  j.max_object_members = static_cast<size_t>(limits.max_json_object_members);
  j.max_array_elements = static_cast<size_t>(limits.max_json_array_elements);
  return j;  // strings: bounded by the body size (--max-request-bytes)
}

Err WrongType(const std::string& name, const char* want, const Json& v) {
  return BadRequest(fmt::format("'{}' must be {}, got {}", name, want, TypeName(v)), name);
}

// Present and not null.
const Json* Field(const Json& body, const std::string& name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

Err ReadNumber(const Json& body, const std::string& name, double lo, double hi, float* out) {
  const Json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(name, "a number", *v);
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) {
    return BadRequest(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, d), name);
  }
  *out = static_cast<float>(d);
  return std::nullopt;
}

Err ReadInt(const Json& body, const std::string& name, int64_t lo, int64_t hi, int64_t* out) {
  const Json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) return WrongType(name, "an integer", *v);
  const int64_t i =
      v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX ? INT64_MAX : v->get<int64_t>();
  if (i < lo || i > hi) {
    return BadRequest(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, i), name);
  }
  *out = i;
  return std::nullopt;
}

Err ReadBool(const Json& body, const std::string& name, bool* out) {
  const Json* v = Field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return WrongType(name, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

Err CheckKnownFields(const Json& body, const std::set<std::string>& extra) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (!kCommonFields.count(it.key()) && !extra.count(it.key())) {
      return BadRequest(fmt::format("unknown field '{}'", it.key()), it.key());
    }
  }
  return std::nullopt;
}

Err ReadStop(const Json& body, const RequestLimits& limits, ParsedRequest* out) {
  if (const Json* v = Field(body, "stop")) {
    if (v->is_string()) {
      out->stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (static_cast<int64_t>(v->size()) > limits.max_stop_strings) {
        return BadRequest(fmt::format("'stop' holds at most {} strings, got {}",
                                      limits.max_stop_strings, v->size()),
                          "stop");
      }
      for (const Json& s : *v) {
        if (!s.is_string()) return WrongType("stop", "a string or a list of strings", *v);
        out->stop.push_back(s.get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or a list of strings", *v);
    }
    for (const std::string& s : out->stop) {
      if (static_cast<int64_t>(s.size()) > limits.max_stop_bytes) {
        return BadRequest(fmt::format("stop strings are at most {} bytes, got one of {}",
                                      limits.max_stop_bytes, s.size()),
                          "stop");
      }
    }
  }
  if (const Json* v = Field(body, "stop_token_ids")) {
    if (!v->is_array()) return WrongType("stop_token_ids", "a list of integers", *v);
    if (static_cast<int64_t>(v->size()) > limits.max_stop_token_ids) {
      return BadRequest(fmt::format("'stop_token_ids' holds at most {} ids, got {}",
                                    limits.max_stop_token_ids, v->size()),
                        "stop_token_ids");
    }
    for (const Json& id : *v) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return BadRequest("'stop_token_ids' must hold non-negative token ids", "stop_token_ids");
      }
      out->stop_token_ids.push_back(id.get<int32_t>());
    }
  }
  return std::nullopt;
}

// OpenAI logit_bias: {"<token id>": bias in [-100, 100], ...}.  Ids beyond
// the vocabulary are refused at submission (Sampler::Validate knows it).
Err ReadLogitBias(const Json& body, engine::SamplingParams* sp) {
  const Json* lb = Field(body, "logit_bias");
  if (lb == nullptr) return std::nullopt;
  if (!lb->is_object()) return WrongType("logit_bias", "an object", *lb);
  for (auto it = lb->begin(); it != lb->end(); ++it) {
    const std::string& key = it.key();
    const bool digits = !key.empty() && key.size() <= 10 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    const int64_t id = digits ? std::stoll(key) : -1;
    if (id < 0 || id > INT32_MAX) {
      return BadRequest(fmt::format("'logit_bias' keys must be token ids, got '{}'", key),
                        "logit_bias");
    }
    if (!it->is_number()) return WrongType("logit_bias." + key, "a number", *it);
    const double bias = it->get<double>();
    if (!(bias >= -100 && bias <= 100)) {
      return BadRequest(
          fmt::format("'logit_bias' values must be in [-100, 100], got {} for token {}", bias, id),
          "logit_bias");
    }
    sp->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  return std::nullopt;
}

// Fields shared by both endpoints: sampling, stopping, n, streaming.
Err ReadCommon(const Json& body, const ServerOptions& options, ParsedRequest* out) {
  if (const Json* m = Field(body, "model")) {
    if (!m->is_string()) return WrongType("model", "a string", *m);
    if (m->get<std::string>() != options.served_model_name) {
      ApiError e = BadRequest(fmt::format("The model '{}' does not exist; this server serves '{}'",
                                          m->get<std::string>(), options.served_model_name),
                              "model");
      e.code = "model_not_found";
      return e;
    }
  }
  engine::SamplingParams& sp = out->sampling;
  sp = options.default_sampling;  // the fields a request leaves out
  int64_t top_k = sp.top_k, n = 1, min_tokens = 0;
  Err e;
  if ((e = ReadNumber(body, "temperature", 0.0, 2.0, &sp.temperature))) return e;
  if ((e = ReadNumber(body, "top_p", 1e-9, 1.0, &sp.top_p))) return e;
  if ((e = ReadInt(body, "top_k", -1, INT32_MAX, &top_k))) return e;
  sp.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  if ((e = ReadNumber(body, "min_p", 0.0, 1.0, &sp.min_p))) return e;
  if ((e = ReadNumber(body, "presence_penalty", -2.0, 2.0, &sp.presence_penalty))) return e;
  if ((e = ReadNumber(body, "frequency_penalty", -2.0, 2.0, &sp.frequency_penalty))) return e;
  if ((e = ReadNumber(body, "repetition_penalty", 1e-6, 100.0, &sp.repetition_penalty))) return e;
  if (const Json* s = Field(body, "seed")) {
    if (!s->is_number_integer()) return WrongType("seed", "an integer", *s);
    sp.seed =
        s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
  }
  if ((e = ReadBool(body, "ignore_eos", &sp.ignore_eos))) return e;
  if ((e = ReadInt(body, "min_tokens", 0, INT32_MAX, &min_tokens))) return e;
  sp.min_tokens = static_cast<int32_t>(min_tokens);
  if ((e = ReadBool(body, "include_stop_str_in_output", &out->include_stop_str_in_output))) {
    return e;
  }
  if ((e = ReadInt(body, "n", 1, 128, &n))) return e;
  out->n = static_cast<int32_t>(n);
  if ((e = ReadBool(body, "stream", &out->stream))) return e;
  if ((e = ReadBool(body, "skip_special_tokens", &out->skip_special_tokens))) return e;
  if (const Json* so = Field(body, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (!out->stream)
      return BadRequest("'stream_options' requires 'stream': true", "stream_options");
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() != "include_usage" && it.key() != "continuous_usage_stats") {
        return BadRequest(fmt::format("unknown field 'stream_options.{}'", it.key()),
                          "stream_options");
      }
    }
    if ((e = ReadBool(*so, "include_usage", &out->include_usage))) return e;
  }
  if ((e = ReadLogitBias(body, &out->sampling))) return e;
  if (const Json* u = Field(body, "user"); u && !u->is_string())
    return WrongType("user", "a string", *u);
  return ReadStop(body, options.limits, out);
}

// A chat request's max_tokens when it sets none: what is left of the context,
// capped by generation_config.json's max_new_tokens when one was taken.
int64_t DefaultChatMaxTokens(const ServerOptions& options, int64_t prompt_len) {
  const int64_t left = options.max_model_len - prompt_len;
  return options.default_max_tokens > 0 ? std::min(left, options.default_max_tokens) : left;
}

// max_tokens defaults to what is left of the context (chat) or 16 (completions).
Err CheckLength(const ServerOptions& options, bool max_tokens_given, ParsedRequest* out) {
  for (const auto& prompt : out->prompts) {
    const int64_t len = static_cast<int64_t>(prompt.size());
    int64_t max_tokens = out->max_tokens;
    if (!max_tokens_given && out->chat) max_tokens = DefaultChatMaxTokens(options, len);
    if (len + std::max<int64_t>(max_tokens, 1) > options.max_model_len) {
      return BadRequest(
          fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                      "tokens ({} in the {}, {} in the completion). Please reduce the length of "
                      "the {} or completion.",
                      options.max_model_len, len + std::max<int64_t>(max_tokens, 1), len,
                      out->chat ? "messages" : "prompt", std::max<int64_t>(max_tokens, 1),
                      out->chat ? "messages" : "prompt"),
          out->chat ? "messages" : "prompt");
    }
  }
  if (!max_tokens_given && out->chat) {
    out->max_tokens = DefaultChatMaxTokens(options, static_cast<int64_t>(out->prompts[0].size()));
  }
  if (out->sampling.min_tokens > out->max_tokens) {
    return BadRequest(fmt::format("'min_tokens' ({}) must not exceed max_tokens ({})",
                                  out->sampling.min_tokens, out->max_tokens),
                      "min_tokens");
  }
  return std::nullopt;
}

Err ReadThinking(const Json& body, const ServerOptions& options, ParsedRequest* out,
                 text::EncodeOptions* enc) {
  std::optional<bool> enable_thinking, thinking;
  std::optional<std::string> effort;
  Err e;
  if (const Json* kw = Field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) return WrongType("chat_template_kwargs", "an object", *kw);
    if (kw->contains("tools")) {
      return BadRequest("pass 'tools' as a request field, not inside 'chat_template_kwargs'",
                        "chat_template_kwargs");
    }
    bool b = false;
    if (Field(*kw, "enable_thinking")) {
      if ((e = ReadBool(*kw, "enable_thinking", &b))) return e;
      enable_thinking = b;
    }
    if (Field(*kw, "thinking")) {
      if ((e = ReadBool(*kw, "thinking", &b))) return e;
      thinking = b;
    }
    if (const Json* r = Field(*kw, "reasoning_effort")) {
      if (!r->is_string()) return WrongType("reasoning_effort", "a string", *r);
      effort = r->get<std::string>();
    }
  }
  if (const Json* t = Field(body, "thinking")) {  // the DeepSeek API's form
    if (t->is_object() && t->contains("type") && (*t)["type"].is_string() &&
        ((*t)["type"] == "enabled" || (*t)["type"] == "disabled")) {
      if (!thinking) thinking = (*t)["type"] == "enabled";
    } else if (t->is_boolean()) {
      if (!thinking) thinking = t->get<bool>();
    } else {
      return BadRequest("'thinking' must be {\"type\": \"enabled\"|\"disabled\"}", "thinking");
    }
  }
  if (const Json* r = Field(body, "reasoning_effort")) {
    if (!r->is_string()) return WrongType("reasoning_effort", "a string", *r);
    effort = r->get<std::string>();
  }
  bool on = options.default_thinking;
  if (effort) {
    Result<text::MappedEffort> mapped = text::MapOpenAiReasoningEffort(*effort);
    if (!mapped.ok()) return BadRequest(mapped.status().message(), "reasoning_effort");
    enc->reasoning_effort = mapped->effort;
    on = !mapped->force_chat;  // any effort but "none" defaults thinking on
    if (mapped->force_chat) enable_thinking = false;
  }
  if (thinking) on = *thinking;
  if (enable_thinking) on = *enable_thinking;  // an explicit enable_thinking wins
  out->thinking_mode = on ? text::ThinkingMode::kThinking : text::ThinkingMode::kChat;
  enc->thinking_mode = out->thinking_mode;
  if (!on) enc->reasoning_effort.reset();
  return std::nullopt;
}

// ^[A-Za-z0-9_-]{1,64}$ (OpenAI's rule), without std::regex: libstdc++'s
// matcher recurses per character.
bool IsToolName(const Json* name) {
  if (name == nullptr || !name->is_string()) return false;
  const std::string& s = name->get_ref<const std::string&>();
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

Err ReadTools(const Json& body, const RequestLimits& limits, ParsedRequest* out, Json* tools_out) {
  const Json* tools = Field(body, "tools");
  const Json* choice = Field(body, "tool_choice");
  bool parallel = true;
  if (Err e = ReadBool(body, "parallel_tool_calls", &parallel)) return e;
  out->parallel_tool_calls = parallel;
  if (tools == nullptr || (tools->is_array() && tools->empty())) {
    if (choice && !(choice->is_string() && *choice == "none")) {
      return BadRequest("'tool_choice' is only allowed when 'tools' are given", "tool_choice");
    }
    return std::nullopt;
  }
  if (!tools->is_array()) return WrongType("tools", "a list", *tools);
  if (static_cast<int64_t>(tools->size()) > limits.max_tools) {
    return BadRequest(fmt::format("at most {} tools, got {}", limits.max_tools, tools->size()),
                      "tools");
  }
  std::set<std::string> names;
  *tools_out = Json::array();
  for (const Json& t : *tools) {
    const Json* fn = t.is_object() ? Field(t, "function") : nullptr;
    if (!t.is_object() || t.value("type", "") != "function" || fn == nullptr || !fn->is_object()) {
      return BadRequest("every tool must be {\"type\": \"function\", \"function\": {...}}",
                        "tools");
    }
    const Json* name = Field(*fn, "name");
    if (!IsToolName(name)) {
      return BadRequest("tool function names must match ^[A-Za-z0-9_-]{1,64}$", "tools");
    }
    if (!names.insert(name->get<std::string>()).second) {
      return BadRequest(fmt::format("duplicate tool name '{}'", name->get<std::string>()), "tools");
    }
    const Json* desc = Field(*fn, "description");
    if (desc && !desc->is_string()) return BadRequest("tool descriptions must be strings", "tools");
    const Json* params = Field(*fn, "parameters");
    if (params && !params->is_object())
      return BadRequest("tool parameters must be a JSON schema object", "tools");
    if (const Json* strict = Field(*fn, "strict");
        strict && strict->is_boolean() && strict->get<bool>()) {
      return BadRequest("strict tools cannot be honoured: dsv4 has no constrained decoding",
                        "tools");
    }
    Json f = Json::object();
    f["name"] = *name;
    if (desc) f["description"] = *desc;
    f["parameters"] = params ? *params : Json{{"type", "object"}, {"properties", Json::object()}};
    tools_out->push_back(Json{{"type", "function"}, {"function", std::move(f)}});
    out->tool_names.push_back(name->get<std::string>());
  }
  out->parse_tool_calls = true;
  if (choice) {
    if (choice->is_string() && *choice == "none") {
      out->parse_tool_calls = false;
    } else if (choice->is_string() && *choice == "auto") {
    } else if ((choice->is_string() && *choice == "required") || choice->is_object()) {
      return BadRequest(
          "tool_choice 'required' or a named function cannot be honoured: dsv4 has no "
          "constrained decoding; use 'auto' or 'none'",
          "tool_choice");
    } else {
      return BadRequest("'tool_choice' must be 'auto', 'none', 'required' or a function",
                        "tool_choice");
    }
  }
  return std::nullopt;
}

}  // namespace

namespace {

const std::set<std::string> kRoles = {"system",    "user", "developer",
                                      "assistant", "tool", "latest_reminder"};
const std::set<std::string> kMessageFields = {"role",       "content",      "name",
                                              "tool_calls", "tool_call_id", "reasoning_content",
                                              "reasoning",  "refusal"};

// content: string | null | [{type: "text", text}] -> string or null.
Err FlattenContent(const Json& msg, size_t i, Json* out) {
  const std::string param = fmt::format("messages[{}].content", i);
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) {
    *out = nullptr;
    return std::nullopt;
  }
  if (it->is_string()) {
    *out = *it;
    return std::nullopt;
  }
  if (!it->is_array()) return WrongType(param, "a string or a list of text parts", *it);
  std::string text;
  for (const Json& part : *it) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return BadRequest(param + " parts must be objects with a 'type'", param);
    }
    const std::string type = part["type"];
    if (type != "text" && type != "input_text") {
      return BadRequest(fmt::format("content part type '{}' is not supported (text only)", type),
                        param);
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return BadRequest(param + " text parts need a string 'text'", param);
    }
    text += part["text"].get<std::string>();
  }
  *out = text;
  return std::nullopt;
}

Err ConvertToolCalls(const Json& calls, size_t i, const RequestLimits& limits,
                     std::set<std::string>* ids, Json* out) {
  const std::string param = fmt::format("messages[{}].tool_calls", i);
  if (!calls.is_array()) return WrongType(param, "a list", calls);
  *out = Json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const Json& c = calls[j];
    const Json* fn = c.is_object() ? Field(c, "function") : nullptr;
    if (fn == nullptr || !fn->is_object() || !c.contains("id") || !c["id"].is_string()) {
      return BadRequest(param + ": every call needs a string 'id' and a 'function'", param);
    }
    if (c.contains("type") && c["type"] != "function") {
      return BadRequest(param + ": type must be 'function'", param);
    }
    if (!ids->insert(c["id"].get<std::string>()).second) {
      return BadRequest(fmt::format("duplicate tool call id '{}'", c["id"].get<std::string>()),
                        param);
    }
    const Json* name = Field(*fn, "name");
    const Json* args = Field(*fn, "arguments");
    if (!IsToolName(name)) {
      return BadRequest(param + ": function names must match ^[A-Za-z0-9_-]{1,64}$", param);
    }
    if (args == nullptr || !args->is_string()) {
      return BadRequest(param + ": function.arguments must be a JSON string", param);
    }
    // The arguments are a JSON document of their own, under the same limits
    // as the body: the encoder walks them (docs/server.md "Input limits").
    const std::string args_param = fmt::format("{}[{}].function.arguments", param, j);
    Json parsed;
    if (auto err =
            text::ReadJson(args->get_ref<const std::string&>(), JsonLimitsFor(limits), &parsed)) {
      if (err->limit) {
        return BadRequest(fmt::format("{}: {}{}", args_param, err->message,
                                      err->path.empty() ? "" : " (at " + err->path + ")"),
                          args_param);
      }
    }
    if (!parsed.is_object()) {
      return BadRequest(param + ": function.arguments must decode to a JSON object", args_param);
    }
    out->push_back(Json{{"id", c["id"]},
                        {"type", "function"},
                        {"function", Json{{"name", *name}, {"arguments", *args}}}});
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ConvertMessages(const Json& messages, const Json* tools, Json* out,
                                        const RequestLimits& limits) {
  if (!messages.is_array() || messages.empty()) {
    return BadRequest("'messages' must be a non-empty list", "messages");
  }
  if (static_cast<int64_t>(messages.size()) > limits.max_messages) {
    return BadRequest(
        fmt::format("at most {} messages, got {}", limits.max_messages, messages.size()),
        "messages");
  }
  *out = Json::array();
  std::set<std::string> call_ids;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) return WrongType(param, "an object", m);
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!kMessageFields.count(it.key())) {
        return BadRequest(fmt::format("unknown field '{}' in {}", it.key(), param), param);
      }
    }
    if (!m.contains("role") || !m["role"].is_string() ||
        !kRoles.count(m["role"].get<std::string>())) {
      return BadRequest(param +
                            ".role must be one of system, user, developer, assistant, tool, "
                            "latest_reminder",
                        param + ".role");
    }
    const std::string role = m["role"];
    Json msg = Json::object();
    msg["role"] = role;
    Json content;
    if (Err e = FlattenContent(m, i, &content)) return e;
    const Json* calls = Field(m, "tool_calls");
    if (calls && role != "assistant")
      return BadRequest(param + ": only assistant messages carry tool_calls", param);
    if (calls) {
      Json converted;
      if (Err e = ConvertToolCalls(*calls, i, limits, &call_ids, &converted)) return e;
      if (!converted.empty()) msg["tool_calls"] = std::move(converted);
    }
    if (content.is_null() && !(role == "assistant" && msg.contains("tool_calls"))) {
      return BadRequest(param + ".content may be null only on an assistant message with tool_calls",
                        param + ".content");
    }
    msg["content"] = content.is_null() ? Json("") : content;
    for (const char* key : {"reasoning_content", "reasoning"}) {
      const Json* r = Field(m, key);
      if (r == nullptr) continue;
      if (!r->is_string()) return WrongType(param + "." + key, "a string", *r);
      if (role != "assistant")
        return BadRequest(param + ": only assistant messages carry reasoning", param);
      msg["reasoning_content"] = *r;
    }
    if (role == "tool") {
      const Json* id = Field(m, "tool_call_id");
      if (id == nullptr || !id->is_string()) {
        return BadRequest(param + ": a tool message needs a string 'tool_call_id'",
                          param + ".tool_call_id");
      }
      msg["tool_call_id"] = *id;
    }
    out->push_back(std::move(msg));
  }
  if (tools != nullptr && !tools->empty()) {
    // The encoder reads tools from a system message (the reference inserts an
    // empty one first when there is none).
    auto sys =
        std::find_if(out->begin(), out->end(), [](const Json& m) { return m["role"] == "system"; });
    if (sys == out->end()) {
      out->insert(out->begin(), Json{{"role", "system"}, {"content", ""}});
      sys = out->begin();
    }
    (*sys)["tools"] = *tools;
  }
  return std::nullopt;
}

std::optional<ApiError> ParseRequestBody(std::string_view text, const ServerOptions& options,
                                         Json* body) {
  if (auto err = text::ReadJson(text, JsonLimitsFor(options.limits), body)) {
    if (!err->limit) return BadRequest("the request body is not valid JSON: " + err->message);
    return BadRequest(err->path.empty() ? err->message : err->path + ": " + err->message,
                      err->path);
  }
  if (!body->is_object()) return BadRequest("the request body must be a JSON object");
  return std::nullopt;
}

std::optional<ApiError> ParseChatRequest(const Json& body, const text::Tokenizer& tokenizer,
                                         const ServerOptions& options, ParsedRequest* out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  out->chat = true;
  if (Err e = CheckKnownFields(body, kChatFields)) return e;
  if (Err e = ReadCommon(body, options, out)) return e;
  if (out->n > options.limits.max_choices) {
    return BadRequest(
        fmt::format("'n' must be at most {} on this server", options.limits.max_choices), "n");
  }
  int64_t max_tokens = -1;
  if (Err e = ReadInt(body, "max_tokens", 1, INT32_MAX, &max_tokens)) return e;
  if (Err e = ReadInt(body, "max_completion_tokens", 1, INT32_MAX, &max_tokens)) return e;
  if (max_tokens > 0) out->max_tokens = max_tokens;
  if (Err e = ReadBool(body, "logprobs", &out->logprobs)) return e;
  int64_t top = 0;
  if (Err e = ReadInt(body, "top_logprobs", 0, 20, &top)) return e;
  if (Field(body, "top_logprobs") && !out->logprobs) {
    return BadRequest("'top_logprobs' requires 'logprobs': true", "top_logprobs");
  }
  out->sampling.logprobs = out->logprobs ? static_cast<int32_t>(top) : -1;
  if (Err e = ReadBool(body, "include_reasoning", &out->include_reasoning)) return e;
  if (const Json* rf = Field(body, "response_format")) {
    if (!rf->is_object() || rf->value("type", "") != "text") {
      return BadRequest("only response_format {\"type\": \"text\"} is supported",
                        "response_format");
    }
  }
  text::EncodeOptions enc;
  if (Err e = ReadThinking(body, options, out, &enc)) return e;
  Json tools;
  if (Err e = ReadTools(body, options.limits, out, &tools)) return e;
  const Json* messages = Field(body, "messages");
  if (messages == nullptr) return BadRequest("'messages' is required", "messages");
  Json encoder_messages;
  if (Err e = ConvertMessages(*messages, tools.is_null() ? nullptr : &tools, &encoder_messages,
                              options.limits)) {
    return e;
  }
  Result<std::string> prompt = text::EncodeMessages(encoder_messages, enc);
  if (!prompt.ok()) return BadRequest(prompt.status().message(), "messages");
  out->prompts.push_back(tokenizer.Encode(*prompt));
  return CheckLength(options, max_tokens > 0, out);
}

namespace {

Err ReadIds(const Json& ids, const text::Tokenizer& tokenizer, std::vector<int32_t>* out) {
  for (const Json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= tokenizer.vocab_size()) {
      return BadRequest(
          fmt::format("prompt token ids must be integers in [0, {})", tokenizer.vocab_size()),
          "prompt");
    }
    out->push_back(id.get<int32_t>());
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseCompletionRequest(const Json& body, const text::Tokenizer& tokenizer,
                                               const ServerOptions& options, ParsedRequest* out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  out->chat = false;
  if (Err e = CheckKnownFields(body, kCompletionFields)) return e;
  if (Err e = ReadCommon(body, options, out)) return e;
  int64_t max_tokens = -1;
  if (Err e = ReadInt(body, "max_tokens", 1, INT32_MAX, &max_tokens)) return e;
  if (max_tokens > 0) out->max_tokens = max_tokens;
  int64_t logprobs = -1;
  if (Err e = ReadInt(body, "logprobs", 0, 20, &logprobs)) return e;
  out->logprobs = logprobs >= 0;
  out->sampling.logprobs = static_cast<int32_t>(logprobs);
  if (Err e = ReadBool(body, "echo", &out->echo)) return e;
  if (Field(body, "suffix")) return BadRequest("'suffix' is not supported", "suffix");
  int64_t best_of = out->n;
  if (Err e = ReadInt(body, "best_of", 1, 128, &best_of)) return e;
  if (best_of != out->n) return BadRequest("'best_of' must equal 'n'", "best_of");
  const Json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return BadRequest("'prompt' is required", "prompt");
  // Checked before any prompt is tokenized: every prompt x n is an engine request.
  const bool batch = prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number();
  const int64_t num_prompts = batch ? static_cast<int64_t>(prompt->size()) : 1;
  if (num_prompts * out->n > options.limits.max_choices) {
    return BadRequest(fmt::format("{} prompts x n = {} exceeds the {} choices one request may "
                                  "ask for",
                                  num_prompts, num_prompts * out->n, options.limits.max_choices),
                      "prompt");
  }
  if (prompt->is_string()) {
    out->prompts.push_back(tokenizer.Encode(prompt->get<std::string>()));
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    out->prompts.emplace_back();
    if (Err e = ReadIds(*prompt, tokenizer, &out->prompts.back())) return e;
  } else if (prompt->is_array() && !prompt->empty()) {
    for (const Json& p : *prompt) {
      out->prompts.emplace_back();
      if (p.is_string()) {
        out->prompts.back() = tokenizer.Encode(p.get<std::string>());
      } else if (p.is_array()) {
        if (Err e = ReadIds(p, tokenizer, &out->prompts.back())) return e;
      } else {
        return WrongType("prompt", "a string, a list of strings or token ids", *prompt);
      }
    }
  } else {
    return WrongType("prompt", "a string, a list of strings or token ids", *prompt);
  }
  for (const auto& p : out->prompts) {
    if (p.empty()) return BadRequest("the prompt must not be empty", "prompt");
  }
  return CheckLength(options, true, out);
}

}  // namespace dsv4::server
