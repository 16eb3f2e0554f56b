#include "text/output_parser.h"

#include <algorithm>

#include "text/utf8.h"

namespace dsv4::text {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A DSML tag after the ｜DSML｜ id, without the final '>':
//   NAME ( WS+ KEY="VALUE" )* WS*
struct Tag {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  const std::string* Attr(std::string_view key) const {
    for (const auto& [k, v] : attrs) {
      if (k == key) return &v;
    }
    return nullptr;
  }
};

bool IsNameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

bool ParseTag(std::string_view s, Tag* tag) {
  size_t i = 0;
  while (i < s.size() && IsNameChar(s[i])) ++i;
  if (i == 0) return false;
  tag->name = std::string(s.substr(0, i));
  while (i < s.size()) {
    const size_t ws = i;
    while (i < s.size() && IsSpace(s[i])) ++i;
    if (i == s.size()) break;
    if (i == ws) return false;  // attributes are separated by whitespace
    const size_t k = i;
    while (i < s.size() && IsNameChar(s[i])) ++i;
    if (i == k || i + 1 >= s.size() || s[i] != '=' || s[i + 1] != '"') return false;
    const size_t v = i + 2;
    const size_t close = s.find('"', v);
    if (close == std::string_view::npos) return false;
    tag->attrs.emplace_back(std::string(s.substr(k, i - k)), std::string(s.substr(v, close - v)));
    i = close + 1;
  }
  return true;
}

std::string JsonEscaped(std::string_view s) {
  std::string q;
  PyJsonQuoteTo(s, q);
  return q.substr(1, q.size() - 2);
}

bool ValidName(std::string_view s) {
  if (s.empty() || s.size() > 256 || !IsValidUtf8(s)) return false;
  return std::none_of(s.begin(), s.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20; });
}

// Strict JSON with finite numbers only (NaN, Infinity, 1e9999 rejected).
bool IsStrictJson(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded();  // nlohmann rejects NaN/Infinity literals and overflow
}

constexpr size_t kMaxTagBytes = 4096;

}  // namespace

Result<OutputParser> OutputParser::Create(const Tokenizer& tokenizer, OutputParserOptions options) {
  for (const char* t : {"<think>", "</think>", "｜DSML｜", "<｜end▁of▁sentence｜>"}) {
    if (!tokenizer.TokenId(t))
      return InvalidArgument("output parser: tokenizer has no token '{}'", t);
  }
  return OutputParser(tokenizer, std::move(options));
}

OutputParser::OutputParser(const Tokenizer& tokenizer, OutputParserOptions options)
    : tok_(tokenizer),
      opt_(std::move(options)),
      think_start_id_(*tokenizer.TokenId("<think>")),
      think_end_id_(*tokenizer.TokenId("</think>")),
      dsml_id_(*tokenizer.TokenId("｜DSML｜")),
      eos_id_(*tokenizer.TokenId("<｜end▁of▁sentence｜>")),
      state_(opt_.thinking_mode == ThinkingMode::kThinking ? State::kReasoning : State::kContent) {}

ParserDelta OutputParser::Feed(std::span<const int32_t> ids) {
  delta_ = ParserDelta();
  for (int32_t id : ids) {
    if (state_ == State::kDone || state_ == State::kError) break;
    if (id == eos_id_) {
      OnMarker(Marker::kEos);
    } else if (id == think_start_id_) {
      OnMarker(Marker::kThinkStart);
    } else if (id == think_end_id_) {
      OnMarker(Marker::kThinkEnd);
    } else if (id == dsml_id_) {
      OnMarker(Marker::kDsml);
    } else if (tok_.IsKnown(id) && !tok_.IsSpecial(id)) {
      for (char c : tok_.TokenBytes(id)) OnByte(c);
    }
  }
  return std::move(delta_);
}

ParserDelta OutputParser::Finish() {
  delta_ = ParserDelta();
  switch (state_) {
    case State::kReasoning:
    case State::kContent:
      FlushText(0);
      break;
    case State::kValue:
      // Truncated inside a value: what arrived is part of the partial arguments.
      if (value_is_string_) Emit(Channel::kArguments, pending_);
      break;
    default:
      break;
  }
  pending_.clear();
  FlushUtf8();
  if (state_ != State::kError) state_ = State::kDone;
  return std::move(delta_);
}

OutputParser::Channel OutputParser::TextChannel() const {
  return state_ == State::kReasoning ? Channel::kReasoning : Channel::kContent;
}

void OutputParser::OnByte(char c) {
  switch (state_) {
    case State::kReasoning:
    case State::kContent: {
      // pending_ always matches \n*(<|</)? — text that could still precede a
      // DSML tag (whose leading newlines are dropped).  Anything else is final.
      const bool has_lt = !pending_.empty() && pending_.back() != '\n';
      if (has_lt && c == '/' && pending_.back() == '<') {
        pending_ += c;
      } else if (!has_lt && (c == '\n' || c == '<')) {
        pending_ += c;
      } else {
        FlushText(0);
        if (c == '\n' || c == '<') {
          pending_ = std::string(1, c);
        } else {
          Emit(TextChannel(), std::string_view(&c, 1));
        }
      }
      break;
    }
    case State::kTag:
      tag_ += c;
      // '>' ends the tag unless inside a quoted attribute value.
      if (c == '>' && std::count(tag_.begin(), tag_.end(), '"') % 2 == 0) {
        tag_.pop_back();
        OnTagComplete();
      } else if (tag_.size() > kMaxTagBytes) {
        Fail("DSML tag longer than 4096 bytes");
      }
      break;
    case State::kBlock:
    case State::kInvoke:
      OnStructureByte(c);
      break;
    case State::kValue:
      OnValueByte(c);
      break;
    case State::kDone:
    case State::kError:
      break;
  }
}

void OutputParser::OnMarker(Marker m) {
  switch (state_) {
    case State::kReasoning:
    case State::kContent:
      OnTextMarker(m);
      return;
    case State::kValue:
      OnValueMarker(m);
      return;
    case State::kBlock:
    case State::kInvoke:
      if (m == Marker::kDsml) {
        if (pending_ != "<" && pending_ != "</")
          return Fail("DSML token outside a tag in a tool block");
        OnDsml(pending_ == "</");
      } else if (m == Marker::kEos && state_ == State::kBlock) {
        // Every call is closed; only </｜DSML｜tool_calls> is missing.
        pending_.clear();
        in_tool_block_ = false;
        out_.saw_eos = true;
        state_ = State::kDone;
      } else if (m == Marker::kEos) {
        Fail("generation ended inside a tool call");
      } else {
        Fail("think marker inside a tool block");
      }
      return;
    case State::kTag:
      Fail(m == Marker::kEos ? "generation ended inside a DSML tag" : "marker inside a DSML tag");
      return;
    case State::kDone:
    case State::kError:
      return;
  }
}

void OutputParser::OnTextMarker(Marker m) {
  switch (m) {
    case Marker::kEos:
      FlushText(0);
      FlushUtf8();
      out_.saw_eos = true;
      state_ = State::kDone;
      return;
    case Marker::kThinkEnd:
      FlushText(0);
      if (state_ == State::kReasoning) state_ = State::kContent;  // in content: stray, dropped
      return;
    case Marker::kThinkStart:
      FlushText(0);
      if (state_ == State::kContent && out_.content.empty() && utf8_.empty())
        state_ = State::kReasoning;
      return;
    case Marker::kDsml:
      if (pending_.size() >= 2 && pending_.compare(pending_.size() - 2, 2, "</") == 0) {
        return Fail("closing DSML tag outside a tool block");
      }
      if (pending_.empty() || pending_.back() != '<') return Fail("DSML token outside a tag");
      pending_.clear();  // "\n*<" before the opener is markup
      OnDsml(false);
      return;
  }
}

void OutputParser::OnDsml(bool closing) {
  pending_.clear();
  tag_.clear();
  tag_return_ = state_;
  tag_closing_ = closing;
  state_ = State::kTag;
}

void OutputParser::OnStructureByte(char c) {
  if (pending_.empty() && IsSpace(c)) return;
  if (pending_.empty() && c == '<') {
    pending_ = "<";
  } else if (pending_ == "<" && c == '/') {
    pending_ = "</";
  } else {
    Fail(state_ == State::kBlock ? "unexpected text between tool calls"
                                 : "unexpected text between parameters");
  }
}

void OutputParser::OnValueByte(char c) {
  // pending_ is "", "<" or "</": a possible start of </｜DSML｜parameter>.
  if (pending_ == "<" && c == '/') {
    pending_ = "</";
    return;
  }
  std::string bytes = std::move(pending_);
  pending_.clear();
  if (c == '<') {
    pending_ = "<";
  } else {
    bytes += c;
  }
  if (bytes.empty()) return;
  if (value_is_string_) {
    Emit(Channel::kArguments, bytes);
  } else {
    value_ += bytes;
  }
}

void OutputParser::OnValueMarker(Marker m) {
  if (m == Marker::kEos) return Fail("generation ended inside a tool call parameter");
  if (m == Marker::kDsml) {
    if (pending_ != "</") return Fail("DSML tag inside a parameter value");
    return OnDsml(true);
  }
  // <think> / </think> inside a value are just its text.
  std::string bytes = std::move(pending_);
  pending_.clear();
  bytes += m == Marker::kThinkStart ? "<think>" : "</think>";
  if (value_is_string_) {
    Emit(Channel::kArguments, bytes);
  } else {
    value_ += bytes;
  }
}

void OutputParser::OnTagComplete() {
  Tag tag;
  if (!ParseTag(tag_, &tag)) return Fail("malformed DSML tag '" + SanitizeUtf8(tag_) + "'");
  const State from = tag_return_;
  const bool closing = tag_closing_;
  const bool bare = tag.attrs.empty();
  if ((from == State::kReasoning || from == State::kContent) && !closing &&
      tag.name == "tool_calls" && bare) {
    FlushUtf8();
    in_tool_block_ = true;
    state_ = State::kBlock;
  } else if (from == State::kBlock && !closing && tag.name == "invoke") {
    const std::string* name = tag.Attr("name");
    if (name == nullptr || tag.attrs.size() != 1)
      return Fail("invoke tag needs exactly a name attribute");
    OpenInvoke(*name);
  } else if (from == State::kBlock && closing && tag.name == "tool_calls" && bare) {
    in_tool_block_ = false;
    state_ = State::kContent;
  } else if (from == State::kInvoke && !closing && tag.name == "parameter") {
    const std::string* key = tag.Attr("name");
    const std::string* str = tag.Attr("string");
    if (key == nullptr || str == nullptr || tag.attrs.size() != 2 ||
        (*str != "true" && *str != "false")) {
      return Fail("parameter tag needs name and string=\"true|false\"");
    }
    OpenParameter(*key, *str == "true");
  } else if (from == State::kInvoke && closing &&
             (tag.name == "invoke" || tag.name == "tool_calls") && bare) {
    CloseInvoke();
    if (tag.name == "tool_calls") {
      in_tool_block_ = false;
      state_ = State::kContent;
    }
  } else if (from == State::kValue && closing && tag.name == "parameter" && bare) {
    Status s = CloseParameter();
    if (!s.ok()) return Fail(s.message());
  } else {
    Fail("unexpected DSML tag '" + std::string(closing ? "/" : "") + tag.name + "'");
  }
}

void OutputParser::OpenInvoke(const std::string& name) {
  if (!ValidName(name)) return Fail("invalid tool name '" + SanitizeUtf8(name) + "'");
  if (opt_.parse_tool_calls && !opt_.tool_names.empty() &&
      std::find(opt_.tool_names.begin(), opt_.tool_names.end(), name) == opt_.tool_names.end()) {
    return Fail("call of unknown tool '" + name + "'");
  }
  if (opt_.parse_tool_calls) {
    out_.tool_calls.push_back(ParsedToolCall{name, "", false});
    delta_.tool_calls.push_back(
        ToolCallDelta{static_cast<int>(out_.tool_calls.size()) - 1, name, ""});
  }
  call_open_ = true;
  first_param_ = true;
  param_names_.clear();
  AppendArguments("{");
  state_ = State::kInvoke;
}

void OutputParser::CloseInvoke() {
  AppendArguments("}");
  if (opt_.parse_tool_calls) out_.tool_calls.back().complete = true;
  call_open_ = false;
  state_ = State::kBlock;
}

void OutputParser::OpenParameter(const std::string& key, bool is_string) {
  if (!IsValidUtf8(key)) return Fail("parameter name is not valid UTF-8");
  if (std::find(param_names_.begin(), param_names_.end(), key) != param_names_.end()) {
    return Fail("duplicate parameter '" + key + "'");
  }
  param_names_.push_back(key);
  std::string head = first_param_ ? "" : ", ";
  first_param_ = false;
  PyJsonQuoteTo(key, head);
  head += ": ";
  if (is_string) head += '"';
  AppendArguments(head);
  value_is_string_ = is_string;
  value_.clear();
  state_ = State::kValue;
}

Status OutputParser::CloseParameter() {
  state_ = State::kInvoke;
  if (value_is_string_) {
    FlushUtf8();
    AppendArguments("\"");
    return Status::Ok();
  }
  if (!IsStrictJson(value_)) {
    return InvalidArgument(
        "parameter '{}' has string=\"false\" but its value is not valid JSON "
        "(NaN, Infinity and out-of-range numbers are rejected)",
        param_names_.back());
  }
  AppendArguments(value_);
  value_.clear();
  return Status::Ok();
}

void OutputParser::AppendArguments(std::string_view s) {
  if (!opt_.parse_tool_calls || out_.tool_calls.empty() || s.empty()) return;
  out_.tool_calls.back().arguments += s;
  const int index = static_cast<int>(out_.tool_calls.size()) - 1;
  if (delta_.tool_calls.empty() || delta_.tool_calls.back().index != index) {
    delta_.tool_calls.push_back(ToolCallDelta{index, "", ""});
  }
  delta_.tool_calls.back().arguments += s;
}

void OutputParser::FlushText(size_t keep) {
  if (pending_.size() <= keep) return;
  const size_t n = pending_.size() - keep;
  Emit(TextChannel(), std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
}

void OutputParser::Emit(Channel ch, std::string_view bytes) {
  if (ch != utf8_channel_) {
    FlushUtf8();
    utf8_channel_ = ch;
  }
  utf8_.append(bytes);
  const size_t keep = IncompleteUtf8Suffix(utf8_);
  const std::string text = SanitizeUtf8(std::string_view(utf8_).substr(0, utf8_.size() - keep));
  utf8_.erase(0, utf8_.size() - keep);
  if (text.empty()) return;
  switch (ch) {
    case Channel::kReasoning:
      out_.reasoning_content += text;
      delta_.reasoning_content += text;
      break;
    case Channel::kContent:
      out_.content += text;
      delta_.content += text;
      break;
    case Channel::kArguments:
      AppendArguments(JsonEscaped(text));
      break;
    case Channel::kNone:
      break;
  }
}

void OutputParser::FlushUtf8() {
  if (utf8_.empty()) return;
  // An incomplete sequence that will never complete: one U+FFFD.
  utf8_.clear();
  const Channel ch = utf8_channel_;
  utf8_channel_ = Channel::kNone;
  Emit(ch, "\xEF\xBF\xBD");
  utf8_channel_ = Channel::kNone;
}

void OutputParser::Fail(std::string message) {
  out_.error = InvalidArgument("model output: {}", message);
  pending_.clear();
  value_.clear();
  utf8_.clear();
  state_ = State::kError;
}

}  // namespace dsv4::text
