// `dsv4 tokenize` (apps/dsv4/tokenize_jsonl.cc): training lines must encode
// exactly as the chat encoder + tokenizer encode them, bad lines must be
// rejected with their line number and leave no output behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/mapped_file.h"
#include "text/chat_encoding.h"
#include "tokenize_jsonl.h"
#include "tools/tokenizer_cut.h"

namespace dsv4::cli {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

// The production setup: the DeepSeek tokenizer cut to the dsv4-mini vocabulary.
const text::Tokenizer& MiniTokenizer() {
  static const text::Tokenizer* tok = [] {
    Result<std::string> src =
        ReadFileToString(DSV4_TEST_DATA_DIR "/tokenizer/deepseek_v3_tokenizer.json");
    EXPECT_TRUE(src.ok());
    Result<tools::CutTokenizerFiles> cut = tools::CutTokenizer(*src, "v3", 8192);
    EXPECT_TRUE(cut.ok()) << cut.status().ToString();
    auto t = text::Tokenizer::FromJson(cut->tokenizer_json);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::move(t).value().release();
  }();
  return *tok;
}

class TempDir {
 public:
  TempDir() : path_(fs::path(DSV4_BINARY_DIR) / "tmp" / ("tokenize-" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void WriteLines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream f(path, std::ios::binary);
  for (const std::string& l : lines) f << l << "\n";
}

std::vector<int32_t> ReadUint16(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<int32_t> ids;
  uint16_t v = 0;
  while (f.read(reinterpret_cast<char*>(&v), sizeof v)) ids.push_back(v);
  return ids;
}

const char kWeatherTool[] =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Current weather)"
    R"( for a place", "parameters": {"type": "object", "properties": {"location": {"type": )"
    R"("string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": )"
    R"(["location"]}}})";

// A thinking-mode tool conversation: call, result, final answer.
std::string ToolChatLine() {
  OJson line = OJson::object();
  line["messages"] = OJson::parse(R"([
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "I should call get_weather.",
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
       "arguments": "{\"location\": \"Paris\", \"unit\": \"celsius\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 18}"},
    {"role": "assistant", "content": "It is 18 °C in Paris.",
     "reasoning_content": "The tool says 18 degrees."}])");
  line["tools"] = OJson::array({OJson::parse(kWeatherTool)});
  line["thinking"] = true;
  return line.dump();
}

TEST(Tokenize, ChatLineEqualsEncoderPlusTokenizer) {
  const text::Tokenizer& tok = MiniTokenizer();
  std::vector<int32_t> ids;
  bool is_chat = false;
  Status s = EncodeTrainingLine(ToolChatLine(), tok, &ids, &is_chat);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(is_chat);

  // The same conversation in the encoder's own form: tools on a system message.
  OJson messages = OJson::parse(ToolChatLine())["messages"];
  messages.insert(messages.begin(), OJson{{"role", "system"},
                                          {"content", ""},
                                          {"tools", OJson::array({OJson::parse(kWeatherTool)})}});
  text::EncodeOptions opts;
  opts.thinking_mode = text::ThinkingMode::kThinking;
  Result<std::string> prompt = text::EncodeMessages(messages, opts);
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_EQ(ids, tok.Encode(*prompt));

  // What the model must produce is in there, up to the final EOS.
  const std::string text = tok.Decode(ids);
  EXPECT_EQ(text.rfind("<｜begin▁of▁sentence｜>", 0), 0u);
  EXPECT_NE(
      text.find("<｜Assistant｜><think>I should call get_weather.</think>\n\n<｜DSML｜tool_calls>"
                "\n<｜DSML｜invoke name=\"get_weather\">"),
      std::string::npos)
      << text;
  const std::string tail =
      "<think>The tool says 18 degrees.</think>It is 18 °C in Paris.<｜end▁of▁sentence｜>";
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

TEST(Tokenize, ChatModeDropsEarlierReasoningLikeTheServer) {
  const text::Tokenizer& tok = MiniTokenizer();
  const std::string line = R"({"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "2+2=4"},
    {"role": "user", "content": "3+3?"},
    {"role": "assistant", "content": "6", "reasoning_content": "3+3=6"}], "thinking": true})";
  std::vector<int32_t> ids;
  bool is_chat = false;
  ASSERT_TRUE(EncodeTrainingLine(line, tok, &ids, &is_chat).ok());
  EXPECT_EQ(tok.Decode(ids),
            "<｜begin▁of▁sentence｜>Be brief.<｜User｜>2+2?<｜Assistant｜></think>4"
            "<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜><think>3+3=6</think>6"
            "<｜end▁of▁sentence｜>");
  // Without "thinking": chat mode (the server's default), no reasoning at all.
  const std::string chat = R"({"messages": [{"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"}]})";
  ids.clear();
  ASSERT_TRUE(EncodeTrainingLine(chat, tok, &ids, &is_chat).ok());
  EXPECT_EQ(
      tok.Decode(ids),
      "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>Hello!<｜end▁of▁sentence｜>");
}

TEST(Tokenize, FileOfTextsAndChats) {
  TempDir tmp;
  const text::Tokenizer& tok = MiniTokenizer();
  WriteLines(tmp.sub("in.jsonl"),
             {R"({"text": "In the beginning was the word."})", ToolChatLine()});
  Result<TokenizeStats> stats = TokenizeJsonl(tmp.sub("in.jsonl"), tmp.sub("out.bin"), tok);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->num_texts, 1);
  EXPECT_EQ(stats->num_chats, 1);
  EXPECT_EQ(stats->dtype, "uint16");

  std::vector<int32_t> want = {0};
  for (int32_t id : tok.Encode("In the beginning was the word.")) want.push_back(id);
  want.push_back(1);
  std::vector<int32_t> chat;
  bool is_chat = false;
  ASSERT_TRUE(EncodeTrainingLine(ToolChatLine(), tok, &chat, &is_chat).ok());
  want.insert(want.end(), chat.begin(), chat.end());
  EXPECT_EQ(ReadUint16(tmp.sub("out.bin")), want);
  EXPECT_EQ(stats->num_tokens, static_cast<int64_t>(want.size()));

  std::ifstream side(tmp.sub("out.bin.json"));
  const nlohmann::json meta = nlohmann::json::parse(side);
  EXPECT_EQ(meta["dtype"], "uint16");
  EXPECT_EQ(meta["vocab_size"], 8192);
  EXPECT_EQ(meta["num_tokens"], want.size());
}

TEST(Tokenize, BadLinesNameTheirLineAndWriteNothing) {
  TempDir tmp;
  const text::Tokenizer& tok = MiniTokenizer();
  const std::string good = R"({"text": "fine"})";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"text": "unterminated)", "not valid JSON"},
      {"", "not valid JSON"},
      {"[1, 2]", "JSON object"},
      {R"({"text": ""})", "empty"},
      {R"({"text": "x", "source": "kjv"})", "unknown key 'source'"},
      {R"({"prompt": "x"})", "needs 'text'"},
      {R"({"messages": [{"role": "user", "content": "Hi"}]})", "ending with the assistant"},
      {R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],)"
       R"( "thinking": "yes"})",
       "'thinking' must be true or false"},
      {R"({"messages": [{"role": "wizard", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})",
       "role must be one of"},
      {R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],)"
       R"( "tools": [{"type": "function", "function": {"name": "bad name"}}]})",
       "tool function names"},
  };
  for (const auto& [bad, why] : cases) {
    WriteLines(tmp.sub("in.jsonl"), {good, good, bad, good});
    Result<TokenizeStats> stats = TokenizeJsonl(tmp.sub("in.jsonl"), tmp.sub("out.bin"), tok);
    ASSERT_FALSE(stats.ok()) << bad;
    EXPECT_EQ(stats.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(stats.status().message().find("in.jsonl:3: "), std::string::npos)
        << stats.status().message();
    EXPECT_NE(stats.status().message().find(why), std::string::npos) << stats.status().message();
    EXPECT_FALSE(fs::exists(tmp.sub("out.bin")));
    EXPECT_FALSE(fs::exists(tmp.sub("out.bin.tmp")));
  }
  EXPECT_EQ(TokenizeJsonl(tmp.sub("missing.jsonl"), tmp.sub("out.bin"), tok).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsv4::cli
