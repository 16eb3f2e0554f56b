// Model output (token ids) -> reasoning_content, content and tool calls, for
// DeepSeek-V4 DSML markup, streaming.
//
// Markers count only as their special-token ids: </think> (128822),
// <think> (128821), ｜DSML｜ (128825) and EOS (1).  The same spellings made of
// ordinary tokens are text, so look-alike text stays content and can never
// open a tool block.  The DSML tags are "<" ｜DSML｜ "tool_calls>",
// "<" ｜DSML｜ "invoke name=..." etc.: ordinary text around one DSML id.
//
// The parser is a per-symbol state machine (a symbol = one byte of decoded
// text or one marker), so its output does not depend on how the ids are
// chunked: the deltas of any sequence of Feed() calls concatenate to the same
// final result (tested for chunk sizes 1, 2, 7, 29, whole and random).
// Bytes that may still turn out to be markup ("\n\n<" before a DSML id, "</"
// before a closing tag) or an incomplete UTF-8 character are held back.
//
// Leniency (docs/text.md): a tool block opener inside reasoning ends the
// reasoning; newlines directly before a tool block are dropped; a stray
// </think> in content is dropped; <think> before any content re-enters
// reasoning; text after a tool block is content; </｜DSML｜tool_calls> may
// close an open invoke.  Everything else that is malformed (a DSML id outside
// a tag, an unknown or bad tag, stray text inside a block, a duplicate
// parameter, an unknown tool name, a string="false" value that is not strict
// JSON — NaN, Infinity and out-of-range numbers are rejected) sets error(),
// after which all further output is discarded: markup never leaks into
// content.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "text/chat_encoding.h"
#include "text/tokenizer.h"

namespace dsv4::text {

struct ToolCallDelta {
  int index = 0;          // position of the call in the output, from 0
  std::string name;       // set (non-empty) on the first delta of a call only
  std::string arguments;  // next fragment of the arguments JSON text
};

struct ParserDelta {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning_content.empty() && content.empty() && tool_calls.empty(); }
};

struct ParsedToolCall {
  std::string name;
  // JSON object text in the official reference's format:
  // {"key": value, ...} with string values json.dumps'ed (ensure_ascii=False)
  // and non-string values as written by the model (validated JSON).
  std::string arguments;
  bool complete = false;  // false: generation stopped inside this call
};

struct ParsedOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool saw_eos = false;
  Status error;  // OK unless the output was malformed
};

struct OutputParserOptions {
  // Thinking mode: the prompt ended with <think>, so output starts in reasoning.
  ThinkingMode thinking_mode = ThinkingMode::kChat;
  // false (tool_choice "none"): tool blocks are consumed silently.
  bool parse_tool_calls = true;
  // Known tool names; a call of any other name is an error.  Empty: any name.
  std::vector<std::string> tool_names;
};

class OutputParser {
 public:
  // REQUIRES: `tokenizer` outlives the parser and defines <think>, </think>,
  // ｜DSML｜ and the EOS token.
  static Result<OutputParser> Create(const Tokenizer& tokenizer, OutputParserOptions options);

  // Consumes generated ids; returns what became final.  Ids after EOS or
  // after an error are ignored.
  ParserDelta Feed(std::span<const int32_t> ids);
  // End of generation (EOS seen, or stopped by length/abort): flushes held
  // back text; a call still open is reported incomplete.
  ParserDelta Finish();

  const ParsedOutput& result() const { return out_; }
  const Status& error() const { return out_.error; }

 private:
  enum class Marker { kThinkStart, kThinkEnd, kDsml, kEos };
  enum class State {
    kReasoning,
    kContent,  // free text
    kTag,      // reading a DSML tag up to '>'
    kBlock,    // inside <tool_calls>, between invokes
    kInvoke,   // inside an invoke, between parameters
    kValue,    // inside a parameter value
    kDone,
    kError,
  };
  enum class Channel { kReasoning, kContent, kArguments, kNone };

  OutputParser(const Tokenizer& tokenizer, OutputParserOptions options);

  void OnByte(char c);
  void OnMarker(Marker m);
  void OnTextMarker(Marker m);
  void OnStructureByte(char c);
  void OnValueByte(char c);
  void OnValueMarker(Marker m);
  void OnDsml(bool closing);
  void OnTagComplete();
  void FlushText(size_t keep);
  void Emit(Channel ch, std::string_view bytes);
  void FlushUtf8();
  void Fail(std::string message);
  void OpenInvoke(const std::string& name);
  void CloseInvoke();
  void OpenParameter(const std::string& key, bool is_string);
  Status CloseParameter();
  void AppendArguments(std::string_view s);
  Channel TextChannel() const;

  const Tokenizer& tok_;
  OutputParserOptions opt_;
  int32_t think_start_id_, think_end_id_, dsml_id_, eos_id_;

  State state_;
  State tag_return_ = State::kContent;  // state that opened the current tag
  bool tag_closing_ = false;
  std::string pending_;  // held-back text bytes (see FlushText)
  std::string tag_;      // bytes of the tag being read
  std::string utf8_;     // incomplete UTF-8 sequence of the current channel
  Channel utf8_channel_ = Channel::kNone;
  bool in_tool_block_ = false;
  bool call_open_ = false;
  bool value_is_string_ = false;
  bool first_param_ = true;
  std::string value_;  // buffered string="false" value
  std::vector<std::string> param_names_;
  ParsedOutput out_;
  ParserDelta delta_;  // accumulates during one Feed/Finish call
};

// The official reference parser `parse_message_from_completion_text` (strict:
// for well-formed text only; docs/text.md "The official strict parser"), on
// decoded text including the final EOS.  Used to cross-check the streaming
// parser.
Result<ParsedOutput> ParseCompletionText(std::string_view text, ThinkingMode mode);

}  // namespace dsv4::text
