#include "text/chat_encoding.h"

#include <algorithm>
#include <map>
#include <vector>

#include "text/json_reader.h"

namespace dsv4::text {
namespace {

using Json = OrderedJson;

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";

constexpr std::string_view kEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

constexpr std::string_view kToolsHead =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" "
    "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";
constexpr std::string_view kResponseFormat =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

const std::map<std::string, std::string_view>& TaskTokens() {
  static const auto* m = new std::map<std::string, std::string_view>{
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
  return *m;
}

// Python's msg.get(key): nullptr for a missing key (and for non-objects,
// which callers reject first).
const Json* Get(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool IsNone(const Json* v) { return v == nullptr || v->is_null(); }

// Python truthiness of a JSON value (None, False, 0, "", [], {} are falsy).
bool Truthy(const Json* v) {
  if (IsNone(v)) return false;
  switch (v->type()) {
    case Json::value_t::boolean:
      return v->get<bool>();
    case Json::value_t::number_integer:
      return v->get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return v->get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return v->get<double>() != 0.0;
    case Json::value_t::string:
      return !v->get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !v->empty();
    default:
      return false;
  }
}

std::string RoleOf(const Json& msg) {
  const Json* r = Get(msg, "role");
  return (r && r->is_string()) ? r->get<std::string>() : std::string();
}

// Python str(value) as str.format inserts it; containers are rejected (their
// Python repr is not a format anyone should depend on).
Result<std::string> PyStr(const Json* v, const char* what) {
  if (IsNone(v)) return std::string("None");
  switch (v->type()) {
    case Json::value_t::string:
      return v->get<std::string>();
    case Json::value_t::boolean:
      return std::string(v->get<bool>() ? "True" : "False");
    case Json::value_t::number_float:
      return PyFloatRepr(v->get<double>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return PyJsonDumps(*v);
    default:
      return InvalidArgument("chat encoding: {} must be a string, got {}", what, v->type_name());
  }
}

// `value or ""`.
Result<std::string> StrOrEmpty(const Json* v, const char* what) {
  if (!Truthy(v)) return std::string();
  return PyStr(v, what);
}

// ---- Pipeline steps (docs/text.md "Encoding steps") ----

Result<std::vector<Json>> MergeToolMessages(const std::vector<Json>& messages) {
  std::vector<Json> merged;
  for (const Json& msg : messages) {
    if (!msg.is_object()) return InvalidArgument("chat encoding: every message must be an object");
    const std::string role = RoleOf(msg);
    const bool prev_user_blocks = !merged.empty() && RoleOf(merged.back()) == "user" &&
                                  merged.back().contains("content_blocks");
    if (role == "tool") {
      Json block = {{"type", "tool_result"},
                    {"tool_use_id", msg.value("tool_call_id", Json(""))},
                    {"content", msg.value("content", Json(""))}};
      if (prev_user_blocks) {
        merged.back()["content_blocks"].push_back(std::move(block));
      } else {
        merged.push_back(
            Json{{"role", "user"}, {"content_blocks", Json::array({std::move(block)})}});
      }
    } else if (role == "user") {
      Json text_block = {{"type", "text"}, {"text", msg.value("content", Json(""))}};
      if (prev_user_blocks && IsNone(Get(merged.back(), "task"))) {
        merged.back()["content_blocks"].push_back(std::move(text_block));
      } else {
        Json m = {{"role", "user"},
                  {"content", msg.value("content", Json(""))},
                  {"content_blocks", Json::array({std::move(text_block)})}};
        for (const char* key : {"task", "wo_eos", "mask"}) {
          if (msg.contains(key)) m[key] = msg[key];
        }
        merged.push_back(std::move(m));
      }
    } else {
      merged.push_back(msg);
    }
  }
  return merged;
}

// Stable re-ordering of tool_result blocks into the preceding assistant
// message's call order (unknown ids sort as position 0).  Keys are compared
// as their JSON text, so 1 and "1" differ as they do in Python.
void SortToolResultsByCallOrder(std::vector<Json>& messages) {
  std::map<std::string, int> order;
  for (Json& msg : messages) {
    const std::string role = RoleOf(msg);
    const Json* calls = Get(msg, "tool_calls");
    if (role == "assistant" && Truthy(calls)) {
      order.clear();
      if (!calls->is_array()) continue;
      for (size_t i = 0; i < calls->size(); ++i) {
        const Json& tc = (*calls)[i];
        const Json* id = Get(tc, "id");
        if (!Truthy(id)) {
          const Json* fn = Get(tc, "function");
          id = fn ? Get(*fn, "id") : nullptr;
        }
        if (Truthy(id)) order[PyJsonDumps(*id)] = static_cast<int>(i);
      }
    } else if (role == "user" && Truthy(Get(msg, "content_blocks")) &&
               msg["content_blocks"].is_array()) {
      Json& blocks = msg["content_blocks"];
      std::vector<Json> results;
      for (const Json& b : blocks) {
        if (b.is_object() && b.value("type", Json()) == "tool_result") results.push_back(b);
      }
      if (results.size() <= 1 || order.empty()) continue;
      auto key = [&](const Json& b) {
        auto it = order.find(PyJsonDumps(b.value("tool_use_id", Json(""))));
        return it == order.end() ? 0 : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Json& a, const Json& b) { return key(a) < key(b); });
      size_t next = 0;
      for (Json& b : blocks) {
        if (b.is_object() && b.value("type", Json()) == "tool_result") b = results[next++];
      }
    }
  }
}

int FindLastUserIndex(const std::vector<Json>& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    const std::string role = RoleOf(messages[i]);
    if (role == "user" || role == "developer") return i;
  }
  return -1;
}

std::vector<Json> DropThinkingMessages(const std::vector<Json>& messages) {
  const int last_user = FindLastUserIndex(messages);
  std::vector<Json> out;
  for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
    const std::string role = RoleOf(messages[i]);
    const bool keep = role == "user" || role == "system" || role == "tool" ||
                      role == "latest_reminder" || role == "direct_search_results";
    if (keep || i >= last_user) {
      out.push_back(messages[i]);
    } else if (role == "assistant") {
      Json m = messages[i];
      m.erase("reasoning_content");
      out.push_back(std::move(m));
    }  // developer and other roles before the last user turn are dropped
  }
  return out;
}

// ---- Rendering (docs/text.md "Rendering and transitions", "Tools block and DSML tool calls") ----

Result<std::string> RenderTools(const Json& tools) {
  if (!tools.is_array()) return InvalidArgument("chat encoding: tools must be an array");
  std::string out(kToolsHead);
  bool first = true;
  for (const Json& tool : tools) {
    const Json* fn = Get(tool, "function");
    if (fn == nullptr)
      return InvalidArgument("chat encoding: every tool needs a 'function' member");
    if (!first) out += '\n';
    first = false;
    PyJsonDumpsTo(*fn, out);
  }
  out += kToolsTail;
  return out;
}

Status AppendToolsAndFormat(const Json& msg, std::string& out) {
  const Json* tools = Get(msg, "tools");
  if (Truthy(tools)) {
    DSV4_ASSIGN_OR_RETURN(std::string block, RenderTools(*tools));
    out += "\n\n" + block;
  }
  const Json* rf = Get(msg, "response_format");
  if (Truthy(rf)) {
    out += "\n\n";
    out += kResponseFormat;
    PyJsonDumpsTo(*rf, out);
  }
  return Status::Ok();
}

Result<std::string> RenderArguments(const Json& call) {
  const Json* fn = Get(call, "function");
  const Json* raw = fn ? Get(*fn, "arguments") : nullptr;
  if (raw == nullptr) return InvalidArgument("chat encoding: tool call without function.arguments");
  // json.loads(arguments); on any failure (including a non-string) the whole
  // value becomes one parameter named "arguments".
  // ReadJson, not Json::parse: linear in the number of keys (docs/text.md).
  Json args;
  const bool parsed =
      raw->is_string() && !ReadJson(raw->get_ref<const std::string&>(), JsonLimits{}, &args);
  if (!parsed) args = Json{{"arguments", *raw}};
  if (!args.is_object())
    return InvalidArgument("chat encoding: tool call arguments must be a JSON object");
  std::string out;
  bool first = true;
  for (const auto& [key, value] : args.items()) {
    if (!first) out += '\n';
    first = false;
    const bool is_str = value.is_string();
    out +=
        "<｜DSML｜parameter name=\"" + key + "\" string=\"" + (is_str ? "true" : "false") + "\">";
    if (is_str) {
      out += value.get_ref<const std::string&>();
    } else {
      PyJsonDumpsTo(value, out);
    }
    out += "</｜DSML｜parameter>";
  }
  return out;
}

Result<std::string> RenderToolCalls(const Json& calls) {
  if (!calls.is_array()) return InvalidArgument("chat encoding: tool_calls must be an array");
  std::string out = "\n\n<｜DSML｜tool_calls>\n";
  bool first = true;
  for (const Json& call : calls) {
    const Json* fn = Get(call, "function");
    if (fn == nullptr || !fn->contains("name")) {
      return InvalidArgument("chat encoding: tool call without function.name");
    }
    DSV4_ASSIGN_OR_RETURN(std::string name, PyStr(Get(*fn, "name"), "tool call name"));
    DSV4_ASSIGN_OR_RETURN(std::string args, RenderArguments(call));
    if (!first) out += '\n';
    first = false;
    out += "<｜DSML｜invoke name=\"" + name + "\">\n" + args + "\n</｜DSML｜invoke>";
  }
  out += "\n</｜DSML｜tool_calls>";
  return out;
}

Result<std::string> RenderToolResult(const Json& block) {
  const Json* content = Get(block, "content");
  std::string text;
  if (content != nullptr && content->is_array()) {
    std::vector<std::string> parts;
    for (const Json& b : *content) {
      if (!b.is_object())
        return InvalidArgument("chat encoding: tool content parts must be objects");
      const Json* type = Get(b, "type");
      if (type && type->is_string() && *type == "text") {
        const Json* t = Get(b, "text");
        if (t != nullptr && !t->is_string())
          return InvalidArgument("chat encoding: text part must be a string");
        parts.push_back(t ? t->get<std::string>() : "");
      } else {
        DSV4_ASSIGN_OR_RETURN(std::string tname, PyStr(type, "content part type"));
        parts.push_back("[Unsupported " + tname + "]");
      }
    }
    for (size_t i = 0; i < parts.size(); ++i) text += (i ? "\n\n" : "") + parts[i];
  } else {
    DSV4_ASSIGN_OR_RETURN(text, PyStr(content, "tool message content"));
  }
  return "<tool_result>" + text + "</tool_result>";
}

Result<std::string> RenderUser(const Json& msg) {
  std::string out(kUser);
  const Json* blocks = Get(msg, "content_blocks");
  if (!Truthy(blocks)) {
    DSV4_ASSIGN_OR_RETURN(std::string c, StrOrEmpty(Get(msg, "content"), "user content"));
    return out + c;
  }
  bool first = true;
  for (const Json& block : *blocks) {
    if (!first) out += "\n\n";
    first = false;
    const Json type = block.value("type", Json());
    if (type == "text") {
      const Json* t = Get(block, "text");
      // "\n\n".join() needs str: None or a list of parts is a TypeError there.
      if (t != nullptr && !t->is_string()) {
        return InvalidArgument(
            "chat encoding: user content must be a string (flatten content parts first)");
      }
      out += t ? t->get<std::string>() : "";
    } else if (type == "tool_result") {
      DSV4_ASSIGN_OR_RETURN(std::string r, RenderToolResult(block));
      out += r;
    } else {
      DSV4_ASSIGN_OR_RETURN(std::string tname, PyStr(&type, "content block type"));
      out += "[Unsupported " + tname + "]";
    }
  }
  return out;
}

struct RenderContext {
  const std::vector<Json>& messages;
  ThinkingMode mode;
  bool drop_thinking;
  const std::optional<std::string>& effort;
  int last_user;
};

Result<std::string> RenderAssistant(const RenderContext& ctx, int index) {
  const Json& msg = ctx.messages[index];
  std::string tool_calls;
  const Json* calls = Get(msg, "tool_calls");
  if (Truthy(calls)) {
    DSV4_ASSIGN_OR_RETURN(tool_calls, RenderToolCalls(*calls));
  }
  DSV4_ASSIGN_OR_RETURN(std::string content, StrOrEmpty(Get(msg, "content"), "assistant content"));
  DSV4_ASSIGN_OR_RETURN(std::string reasoning,
                        StrOrEmpty(Get(msg, "reasoning_content"), "assistant reasoning_content"));
  const bool prev_has_task = index >= 1 && !IsNone(Get(ctx.messages[index - 1], "task"));
  std::string thinking;
  if (ctx.mode == ThinkingMode::kThinking && !prev_has_task &&
      (!ctx.drop_thinking || index > ctx.last_user)) {
    thinking = reasoning + std::string(kThinkEnd);
  }
  std::string out = thinking + content + tool_calls;
  if (!Truthy(Get(msg, "wo_eos"))) out += kEos;
  return out;
}

Result<std::string> RenderBody(const RenderContext& ctx, int index) {
  const Json& msg = ctx.messages[index];
  const std::string role = RoleOf(msg);
  if (role == "system") {
    DSV4_ASSIGN_OR_RETURN(std::string out, StrOrEmpty(Get(msg, "content"), "system content"));
    DSV4_RETURN_IF_ERROR(AppendToolsAndFormat(msg, out));
    return out;
  }
  if (role == "developer") {
    const Json* content = Get(msg, "content");
    if (!Truthy(content))
      return InvalidArgument("chat encoding: developer message needs non-empty content");
    if (!content->is_string())
      return InvalidArgument("chat encoding: developer content must be a string");
    std::string out = std::string(kUser) + content->get<std::string>();
    DSV4_RETURN_IF_ERROR(AppendToolsAndFormat(msg, out));
    return out;
  }
  if (role == "user") return RenderUser(msg);
  if (role == "latest_reminder") {
    DSV4_ASSIGN_OR_RETURN(std::string c, PyStr(Get(msg, "content"), "latest_reminder content"));
    return std::string(kLatestReminder) + c;
  }
  if (role == "tool")
    return Internal("chat encoding: tool message was not merged into a user turn");
  if (role == "assistant") return RenderAssistant(ctx, index);
  return InvalidArgument("chat encoding: unknown role '{}'",
                         PyJsonDumps(msg.value("role", Json())));
}

// The text after message `index`: a task token or the generation prompt.
Result<std::string> RenderTransition(const RenderContext& ctx, int index) {
  const int n = static_cast<int>(ctx.messages.size());
  if (index + 1 < n) {
    const std::string next = RoleOf(ctx.messages[index + 1]);
    if (next != "assistant" && next != "latest_reminder") return std::string();
  }
  const Json& msg = ctx.messages[index];
  const Json* task = Get(msg, "task");
  const bool thinking = ctx.mode == ThinkingMode::kThinking;
  if (!IsNone(task)) {
    auto it = task->is_string() ? TaskTokens().find(task->get<std::string>()) : TaskTokens().end();
    if (it == TaskTokens().end())
      return InvalidArgument("chat encoding: invalid task {}", PyJsonDumps(*task));
    if (it->first != "action") return std::string(it->second);
    return std::string(kAssistant) + std::string(thinking ? kThinkStart : kThinkEnd) +
           std::string(it->second);
  }
  const std::string role = RoleOf(msg);
  if (role != "user" && role != "developer") return std::string();
  const bool open_think = thinking && (!ctx.drop_thinking || index >= ctx.last_user);
  return std::string(kAssistant) + std::string(open_think ? kThinkStart : kThinkEnd);
}

Result<std::string> RenderMessage(const RenderContext& ctx, int index) {
  const std::optional<std::string>& effort = ctx.effort;
  if (effort && *effort != "high" && *effort != "max") {
    return InvalidArgument(
        "chat encoding: invalid reasoning_effort '{}' (V4-Flash accepts high, max or none)",
        *effort);
  }
  std::string out;
  if (index == 0 && ctx.mode == ThinkingMode::kThinking && effort == "max") out += kEffortMax;
  DSV4_ASSIGN_OR_RETURN(std::string body, RenderBody(ctx, index));
  DSV4_ASSIGN_OR_RETURN(std::string transition, RenderTransition(ctx, index));
  return out + body + transition;
}

Result<std::vector<Json>> AsList(const Json& v, const char* what) {
  if (v.is_null()) return std::vector<Json>();
  if (!v.is_array()) return InvalidArgument("chat encoding: {} must be an array of messages", what);
  return std::vector<Json>(v.begin(), v.end());
}

}  // namespace

Result<ThinkingMode> ParseThinkingMode(std::string_view s) {
  if (s == "chat") return ThinkingMode::kChat;
  if (s == "thinking") return ThinkingMode::kThinking;
  return InvalidArgument("chat encoding: invalid thinking_mode '{}' (chat or thinking)", s);
}

Result<std::string> EncodeMessages(const OrderedJson& messages_json, const EncodeOptions& options) {
  DSV4_ASSIGN_OR_RETURN(std::vector<Json> raw_messages, AsList(messages_json, "messages"));
  DSV4_ASSIGN_OR_RETURN(std::vector<Json> context, AsList(options.context, "context"));
  DSV4_ASSIGN_OR_RETURN(std::vector<Json> messages, MergeToolMessages(raw_messages));
  // Sorting sees the unmerged context followed by the merged messages (the
  // reference's order of operations); then the context is merged and sorted.
  {
    std::vector<Json> all = context;
    all.insert(all.end(), messages.begin(), messages.end());
    SortToolResultsByCallOrder(all);
    context.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(context.size()));
    messages.assign(all.begin() + static_cast<std::ptrdiff_t>(context.size()), all.end());
  }
  if (!context.empty()) {
    DSV4_ASSIGN_OR_RETURN(context, MergeToolMessages(context));
    SortToolResultsByCallOrder(context);
  }
  std::vector<Json> full = context;
  full.insert(full.end(), messages.begin(), messages.end());

  std::string prompt = (options.add_default_bos_token && context.empty()) ? std::string(kBos) : "";
  bool drop = options.drop_thinking;
  for (const Json& m : full) {
    if (Truthy(Get(m, "tools"))) drop = false;
  }
  size_t num_to_render = messages.size();
  size_t context_len = context.size();
  if (options.thinking_mode == ThinkingMode::kThinking && drop) {
    full = DropThinkingMessages(full);
    num_to_render = full.size() - DropThinkingMessages(context).size();
    context_len = full.size() - num_to_render;
  }
  const RenderContext ctx{full, options.thinking_mode, drop, options.reasoning_effort,
                          FindLastUserIndex(full)};
  for (size_t i = 0; i < num_to_render; ++i) {
    DSV4_ASSIGN_OR_RETURN(std::string part, RenderMessage(ctx, static_cast<int>(i + context_len)));
    prompt += part;
  }
  return prompt;
}

Result<MappedEffort> MapOpenAiReasoningEffort(std::string_view value) {
  MappedEffort m;
  if (value == "none") {
    m.force_chat = true;
  } else if (value == "minimal" || value == "low" || value == "medium") {
    // No effort text: V4-Flash has no lower setting than the default.
  } else if (value == "high") {
    m.effort = "high";
  } else if (value == "xhigh" || value == "max" || value == "ultra") {
    m.effort = "max";
  } else {
    return InvalidArgument(
        "reasoning_effort '{}' is not one of none, minimal, low, medium, high, "
        "xhigh, max",
        value);
  }
  return m;
}

}  // namespace dsv4::text
