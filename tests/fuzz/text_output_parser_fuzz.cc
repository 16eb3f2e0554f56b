// Generated ids -> reasoning / content / tool calls.  Each input byte picks a
// token from an alphabet weighted towards DSML structure (markers, tag
// fragments, JSON pieces) or a raw byte token.  Properties: parsing with two
// different chunkings gives identical results and deltas that add up to
// them; all text is valid UTF-8; every complete call has JSON-object
// arguments.  The strict reference parser also runs on the decoded text.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/text_fuzz_common.h"
#include "text/output_parser.h"
#include "text/utf8.h"

using namespace dsv4::text;

namespace {

const std::vector<int32_t>& Alphabet() {
  static const std::vector<int32_t> ids = [] {
    const Tokenizer& tok = fuzz::V4Tokenizer();
    std::vector<int32_t> v = {1, 0, 2, 128821, 128822, 128825, 129279, 128803};
    for (const char* s : {"\n\n",
                          "<",
                          "</",
                          ">\n",
                          "tool_calls>",
                          "invoke name=\"f\">",
                          "invoke",
                          " name=\"",
                          "parameter name=\"a\" string=\"true\">",
                          "parameter",
                          " string=\"false\">",
                          "\">",
                          "true",
                          "false",
                          "null",
                          "1",
                          "[",
                          "]",
                          "{",
                          "}",
                          "\"",
                          ",",
                          ":",
                          "NaN",
                          "1e999",
                          "hello",
                          " ",
                          "\n",
                          "中",
                          "😀",
                          "\\"}) {
      for (int32_t id : tok.Encode(s)) v.push_back(id);
    }
    return v;
  }();
  return ids;
}

struct Outcome {
  ParsedOutput result;
  std::string reasoning, content, args;
};

Outcome Parse(const std::vector<int32_t>& ids, ThinkingMode mode, bool tools, size_t chunk) {
  OutputParserOptions opt;
  opt.thinking_mode = mode;
  opt.parse_tool_calls = tools;
  auto parser = OutputParser::Create(fuzz::V4Tokenizer(), opt);
  fuzz::Require(parser.ok(), "parser creation");
  Outcome o;
  auto absorb = [&](const ParserDelta& d) {
    o.reasoning += d.reasoning_content;
    o.content += d.content;
    for (const auto& t : d.tool_calls) o.args += t.arguments;
  };
  for (size_t i = 0; i < ids.size(); i += chunk) {
    absorb(parser->Feed(std::span<const int32_t>(ids).subspan(i, std::min(chunk, ids.size() - i))));
  }
  absorb(parser->Finish());
  o.result = parser->result();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Tokenizer& tok = fuzz::V4Tokenizer();
  const auto& alphabet = Alphabet();
  std::vector<int32_t> ids;
  for (size_t i = 1; i < size; ++i) {
    const uint8_t b = data[i];
    if (b < 192) {
      ids.push_back(alphabet[b % alphabet.size()]);
    } else if (i + 1 < size) {  // a raw byte token
      ids.push_back(tok.Encode(std::string(1, static_cast<char>(data[++i])))[0]);
    }
  }
  const ThinkingMode mode = (data[0] & 1) ? ThinkingMode::kThinking : ThinkingMode::kChat;
  const bool tools = (data[0] & 2) == 0;
  const Outcome whole = Parse(ids, mode, tools, ids.size() + 1);
  const Outcome split = Parse(ids, mode, tools, 1 + data[0] % 7);
  const ParsedOutput& a = whole.result;
  const ParsedOutput& b = split.result;
  fuzz::Require(a.content == b.content && a.reasoning_content == b.reasoning_content,
                "chunking changed text");
  fuzz::Require(a.error.ToString() == b.error.ToString() && a.saw_eos == b.saw_eos,
                "chunking changed state");
  fuzz::Require(a.tool_calls.size() == b.tool_calls.size(), "chunking changed calls");
  std::string all_args;
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    fuzz::Require(a.tool_calls[i].arguments == b.tool_calls[i].arguments,
                  "chunking changed arguments");
    fuzz::Require(a.tool_calls[i].name == b.tool_calls[i].name, "chunking changed names");
    fuzz::Require(IsValidUtf8(a.tool_calls[i].arguments), "arguments not UTF-8");
    if (a.tool_calls[i].complete) {
      const auto j = OrderedJson::parse(a.tool_calls[i].arguments, nullptr, false);
      fuzz::Require(!j.is_discarded() && j.is_object(),
                    "complete call with invalid arguments JSON");
    }
    all_args += a.tool_calls[i].arguments;
  }
  fuzz::Require(split.content == b.content && split.reasoning == b.reasoning_content &&
                    split.args == all_args,
                "deltas do not add up");
  fuzz::Require(IsValidUtf8(a.content) && IsValidUtf8(a.reasoning_content), "text not UTF-8");
  (void)ParseCompletionText(tok.Decode(ids), mode);
  return 0;
}
