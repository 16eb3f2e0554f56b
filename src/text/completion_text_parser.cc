// The official reference parser, parse_message_from_completion_text
// (docs/text.md "The official strict parser"), on text.  Strict by design: it
// exists to pin down the reference's results so the streaming OutputParser can
// be checked against it.
#include <algorithm>
#include <optional>

#include "text/output_parser.h"
#include "text/py_json.h"

namespace dsv4::text {
namespace {

constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kDsml = "｜DSML｜";
constexpr std::string_view kBlockStart = "\n\n<｜DSML｜tool_calls";
constexpr std::string_view kBlockEnd = "</｜DSML｜tool_calls>";
constexpr std::string_view kInvoke = "<｜DSML｜invoke";
constexpr std::string_view kInvokeEnd = "</｜DSML｜invoke";
constexpr std::string_view kParam = "<｜DSML｜parameter";
constexpr std::string_view kParamEnd = "/｜DSML｜parameter";

// _read_until_stop: text up to the earliest stop; position after it.
struct Read {
  size_t next;
  std::string_view text;
  std::optional<std::string_view> stop;
};

Read ReadUntil(std::string_view s, size_t from, std::initializer_list<std::string_view> stops) {
  size_t best = std::string_view::npos;
  std::optional<std::string_view> which;
  for (std::string_view stop : stops) {
    const size_t p = s.find(stop, from);
    if (p != std::string_view::npos && p < best) {
      best = p;
      which = stop;
    }
  }
  if (!which) return {s.size(), s.substr(from), std::nullopt};
  return {best + which->size(), s.substr(from, best - from), which};
}

Status Error(std::string_view what) { return InvalidArgument("completion text: {}", what); }

// One invoke's name line: ^\s*name="(.*?)">\n$ (the anchors make the lazy
// group take everything between).
std::optional<std::string> InvokeName(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  s.remove_prefix(i);
  constexpr std::string_view kHead = "name=\"", kTail = "\">\n";
  if (s.size() < kHead.size() + kTail.size() || s.substr(0, kHead.size()) != kHead ||
      s.substr(s.size() - kTail.size()) != kTail) {
    return std::nullopt;
  }
  return std::string(s.substr(kHead.size(), s.size() - kHead.size() - kTail.size()));
}

// One parameter: ^ name="(.*?)" string="(true|false)">(.*?)<$ — the lazy name
// ends at the first '" string="true|false">'; the value runs to the final '<'.
bool ParseParam(std::string_view s, std::string* key, bool* is_string, std::string* value) {
  constexpr std::string_view kHead = " name=\"";
  if (s.substr(0, kHead.size()) != kHead || s.empty() || s.back() != '<') return false;
  const size_t t = s.find("\" string=\"true\">", kHead.size());
  const size_t f = s.find("\" string=\"false\">", kHead.size());
  const size_t at = std::min(t, f);
  if (at == std::string_view::npos) return false;
  *is_string = at == t;
  const size_t value_start = at + (*is_string ? 16 : 17);
  if (value_start > s.size() - 1) return false;
  *key = std::string(s.substr(kHead.size(), at - kHead.size()));
  *value = std::string(s.substr(value_start, s.size() - 1 - value_start));
  return true;
}

Status ParseToolCalls(std::string_view text, size_t* index, std::vector<ParsedToolCall>* calls) {
  while (*index < text.size()) {
    Read r = ReadUntil(text, *index, {kInvoke, kBlockEnd});
    *index = r.next;
    if (r.text != ">\n") return Error("expected '>\\n' in tool calls");
    if (r.stop == kBlockEnd) break;
    if (!r.stop) return Error("missing special token in tool calls");
    r = ReadUntil(text, *index, {kParam, kInvokeEnd});
    *index = r.next;
    const auto name = InvokeName(r.text);
    if (!name) return Error("tool name format");
    std::vector<std::pair<std::string, std::pair<std::string, bool>>> args;
    while (r.stop == kParam) {
      Read p = ReadUntil(text, *index, {kParamEnd});
      *index = p.next;
      std::string key, value;
      bool is_string = false;
      if (!ParseParam(p.text, &key, &is_string, &value)) return Error("parameter format");
      for (const auto& a : args) {
        if (a.first == key) return Error("duplicate parameter name");
      }
      args.push_back({key, {value, is_string}});
      r = ReadUntil(text, *index, {kParam, kInvokeEnd});
      *index = r.next;
      if (r.text != ">\n") return Error("expected '>\\n' after parameter");
    }
    std::string json = "{";
    for (size_t i = 0; i < args.size(); ++i) {
      if (i) json += ", ";
      PyJsonQuoteTo(args[i].first, json);
      json += ": ";
      if (args[i].second.second) {
        PyJsonQuoteTo(args[i].second.first, json);
      } else {
        json += args[i].second.first;
      }
    }
    json += "}";
    calls->push_back(ParsedToolCall{*name, json, true});
  }
  return Status::Ok();
}

}  // namespace

Result<ParsedOutput> ParseCompletionText(std::string_view text, ThinkingMode mode) {
  ParsedOutput out;
  size_t index = 0;
  std::optional<std::string_view> stop;
  if (mode == ThinkingMode::kThinking) {
    Read r = ReadUntil(text, 0, {kThinkEnd, kBlockStart});
    index = r.next;
    out.reasoning_content = std::string(r.text);
    if (r.stop != kThinkEnd) return Error("missing </think>");
  }
  Read r = ReadUntil(text, index, {kEos, kBlockStart});
  index = r.next;
  stop = r.stop;
  out.content = std::string(r.text);
  if (stop == kBlockStart) {
    DSV4_RETURN_IF_ERROR(ParseToolCalls(text, &index, &out.tool_calls));
    Read tail = ReadUntil(text, index, {kEos});
    index = tail.next;
    stop = tail.stop;
    if (!tail.text.empty()) return Error("unexpected content after tool calls");
  } else if (stop != kEos) {
    return Error("missing EOS");
  }
  if (index != text.size() || (stop && stop != kEos)) return Error("unexpected content at end");
  for (std::string_view sp : {kBos, kEos, kThinkStart, kThinkEnd, kDsml}) {
    if (out.content.find(sp) != std::string::npos ||
        out.reasoning_content.find(sp) != std::string::npos) {
      return Error("special token in content");
    }
  }
  out.saw_eos = true;
  return out;
}

}  // namespace dsv4::text
