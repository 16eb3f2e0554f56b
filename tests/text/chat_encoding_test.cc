#include "text/chat_encoding.h"

#include <gtest/gtest.h>

#include "tests/text/text_test_util.h"

namespace dsv4::text {
namespace {

using testing::ReadText;
using Json = OrderedJson;

// kwargs of the Python call -> EncodeOptions (an invalid thinking_mode is an error).
Result<EncodeOptions> OptionsFromKwargs(const Json& kwargs) {
  EncodeOptions o;
  DSV4_ASSIGN_OR_RETURN(o.thinking_mode,
                        ParseThinkingMode(kwargs.value("thinking_mode", std::string())));
  if (kwargs.contains("reasoning_effort") && !kwargs["reasoning_effort"].is_null()) {
    o.reasoning_effort = kwargs["reasoning_effort"].get<std::string>();
  }
  o.drop_thinking = kwargs.value("drop_thinking", true);
  o.add_default_bos_token = kwargs.value("add_default_bos_token", true);
  if (kwargs.contains("context")) o.context = kwargs["context"];
  return o;
}

Result<std::string> Encode(const Json& messages, const Json& kwargs) {
  DSV4_ASSIGN_OR_RETURN(EncodeOptions o, OptionsFromKwargs(kwargs));
  return EncodeMessages(messages, o);
}

TEST(ChatEncodingTest, OfficialFixturesFromVerbatimFiles) {
  for (int i = 1; i <= 4; ++i) {
    const std::string dir = "text/encoding/official_v4_flash/";
    Json input = Json::parse(ReadText(dir + "test_input_" + std::to_string(i) + ".json"));
    Json messages = input;
    if (i == 1) {  // the official runner attaches the tools to messages[0]
      messages = input["messages"];
      messages[0]["tools"] = input["tools"];
    }
    EncodeOptions o;
    o.thinking_mode = i == 4 ? ThinkingMode::kChat : ThinkingMode::kThinking;
    auto prompt = EncodeMessages(messages, o);
    ASSERT_TRUE(prompt.ok()) << i << ": " << prompt.status().ToString();
    EXPECT_EQ(*prompt, ReadText(dir + "test_output_" + std::to_string(i) + ".txt"))
        << "fixture " << i;
  }
}

TEST(ChatEncodingTest, OfficialCasesFile) {
  const Json cases = Json::parse(ReadText("text/encoding/official_v4_flash/official_cases.json"));
  int n = 0;
  for (const Json& c : cases["cases"]) {
    auto prompt = Encode(c["messages"], c["kwargs"]);
    ASSERT_TRUE(prompt.ok()) << c["name"] << prompt.status().ToString();
    EXPECT_EQ(*prompt, c["expected_prompt"].get<std::string>()) << c["name"];
    ++n;
  }
  EXPECT_EQ(n, 4);
}

TEST(ChatEncodingTest, DerivedCases) {
  const Json d = Json::parse(ReadText("text/encoding/derived_from_reference/derived_cases.json"));
  int num_ok = 0, num_err = 0;
  for (const Json& c : d["encode_cases"]) {
    auto prompt = Encode(c["messages"], c["kwargs"]);
    if (c.contains("expected_error")) {
      EXPECT_FALSE(prompt.ok()) << c["name"] << " should fail (" << c["expected_error"] << ")";
      ++num_err;
    } else {
      ASSERT_TRUE(prompt.ok()) << c["name"] << ": " << prompt.status().ToString();
      EXPECT_EQ(*prompt, c["expected_prompt"].get<std::string>()) << c["name"];
      ++num_ok;
    }
  }
  EXPECT_EQ(num_ok, 39);
  EXPECT_EQ(num_err, 4);
}

TEST(ChatEncodingTest, Golden0731CasesValidForTheOriginalEncoder) {
  const Json g = Json::parse(ReadText("text/encoding/v4_flash_0731/golden_0731_freebuff.json"));
  int n = 0;
  for (const Json& c : g["cases"]) {
    const std::string name = c["name"];
    if (name == "thinking_high" || name == "thinking_max") continue;  // 0731-only effort table
    auto prompt = Encode(c["messages"], c["kwargs"]);
    ASSERT_TRUE(prompt.ok()) << name << ": " << prompt.status().ToString();
    EXPECT_EQ(*prompt, c["expected_prompt"].get<std::string>()) << name;
    ++n;
  }
  EXPECT_EQ(n, 6);
}

TEST(ChatEncodingTest, PyptoGoldensWhereTheyAgreeWithTheOfficialEncoder) {
  EncodeOptions chat;
  EncodeOptions think;
  think.thinking_mode = ThinkingMode::kThinking;
  const Json one = Json::parse(R"([{"role":"user","content":"What is 1+1?"}])");
  EXPECT_EQ(*EncodeMessages(one, chat),
            "<｜begin▁of▁sentence｜><｜User｜>What is 1+1?<｜Assistant｜></think>");
  EXPECT_EQ(*EncodeMessages(one, think),
            "<｜begin▁of▁sentence｜><｜User｜>What is 1+1?<｜Assistant｜><think>");
  const Json multi = Json::parse(R"([{"role":"system","content":"Be concise."},
      {"role":"user","content":"What is 1+1?"},{"role":"assistant","content":"2"},
      {"role":"user","content":"And +1?"}])");
  EXPECT_EQ(*EncodeMessages(multi, think),
            "<｜begin▁of▁sentence｜>Be concise.<｜User｜>What is 1+1?<｜Assistant｜></think>2"
            "<｜end▁of▁sentence｜><｜User｜>And +1?<｜Assistant｜><think>");
  const Json tools = Json::parse(R"([
      {"role":"system","content":"Be concise.","tools":[{"type":"function","function":{"name":"weather",
        "description":"w","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]},
      {"role":"user","content":"Weather?"},
      {"role":"assistant","content":"","tool_calls":[
        {"id":"a","type":"function","function":{"name":"weather","arguments":"{\"city\":\"X\",\"n\":2,\"f\":true,\"z\":null}"}},
        {"id":"b","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Y\"}"}}]},
      {"role":"tool","tool_call_id":"b","content":"Cold"},
      {"role":"tool","tool_call_id":"a","content":"Warm"}])");
  const std::string p = *EncodeMessages(tools, think);
  EXPECT_EQ(p.rfind("<｜begin▁of▁sentence｜>Be concise.\n\n## Tools", 0), 0u);
  EXPECT_NE(p.find("\"name\": \"weather\""), std::string::npos);
  EXPECT_NE(p.find("string=\"false\">2<"), std::string::npos);
  EXPECT_NE(p.find("string=\"false\">true<"), std::string::npos);
  EXPECT_NE(p.find("string=\"false\">null<"), std::string::npos);
  const std::string tail =
      "<｜User｜><tool_result>Warm</tool_result>\n\n<tool_result>Cold</"
      "tool_result><｜Assistant｜><think>";
  EXPECT_EQ(p.substr(p.size() - tail.size()), tail);
  const Json after = Json::parse(R"([{"role":"user","content":"Q"},
      {"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"a","content":"Data"},{"role":"user","content":"Explain it"}])");
  const std::string q = *EncodeMessages(after, chat);
  const std::string tail2 =
      "<｜User｜><tool_result>Data</tool_result>\n\nExplain it<｜Assistant｜></think>";
  EXPECT_EQ(q.substr(q.size() - tail2.size()), tail2);
}

TEST(ChatEncodingTest, Golden0731ToolPromptLengthHeadAndTail) {
  // The third-party 0731 check describes the request in prose; this is its
  // natural OpenAI form.  Prompt -> ids must give 288 ids with the pinned
  // first and last eight.
  const Json g = Json::parse(ReadText("text/encoding/v4_flash_0731/golden_0731_freebuff.json"));
  const Json messages = Json::parse(R"([
      {"role": "system", "content": "You are a helpful assistant.", "tools": [{"type": "function",
        "function": {"name": "get_weather", "description": "Get weather", "parameters": {"type": "object",
          "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
          "required": ["location"]}}}]},
      {"role": "user", "content": "Get weather for Beijing"}])");
  EncodeOptions o;
  o.thinking_mode = ThinkingMode::kThinking;
  auto prompt = EncodeMessages(messages, o);
  ASSERT_TRUE(prompt.ok());
  const std::vector<int32_t> ids = testing::V4Tokenizer().Encode(*prompt);
  const Json& c = g["tool_system_case"];
  ASSERT_EQ(ids.size(), c["ids_len"].get<size_t>());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 8),
            c["ids_head"].get<std::vector<int32_t>>());
  EXPECT_EQ(std::vector<int32_t>(ids.end() - 8, ids.end()),
            c["ids_tail"].get<std::vector<int32_t>>());
}

TEST(ChatEncodingTest, PythonJsonDumpsFormatting) {
  const Json v =
      Json::parse(R"({"b": 1, "a": [1.5, 1.0, 1e-7, 1e16, -0.0, 100000.0, 1e5, 0.1, 123456789.125,
      12345678901234567890, -3, true, false, null],
      "s": "q\" b\\ / \n\r\t\b\f \u0001 \u007f \u2028 é 中 😀", "o": {}, "e": []})");
  EXPECT_EQ(
      PyJsonDumps(v),
      "{\"b\": 1, \"a\": [1.5, 1.0, 1e-07, 1e+16, -0.0, 100000.0, 100000.0, 0.1, 123456789.125, "
      "12345678901234567890, -3, true, false, null], "
      "\"s\": \"q\\\" b\\\\ / \\n\\r\\t\\b\\f \\u0001 \x7f \u2028 é 中 😀\", \"o\": {}, \"e\": []}");
  EXPECT_EQ(PyFloatRepr(1e22), "1e+22");
  EXPECT_EQ(PyFloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PyFloatRepr(0.00001), "1e-05");
  EXPECT_EQ(PyFloatRepr(2.5e-300), "2.5e-300");
  EXPECT_EQ(PyFloatRepr(-1.7976931348623157e308), "-1.7976931348623157e+308");
  EXPECT_EQ(PyFloatRepr(std::numeric_limits<double>::infinity()), "Infinity");
}

TEST(ChatEncodingTest, ErrorCases) {
  EncodeOptions chat;
  EncodeOptions bad_effort;
  bad_effort.thinking_mode = ThinkingMode::kThinking;
  bad_effort.reasoning_effort = "low";
  const char* kBad[] = {
      R"({"role":"user"})",                                           // not a list
      R"([1])",                                                       // not an object
      R"([{"role":"robot","content":"x"}])",                          // unknown role
      R"([{"role":"developer","content":""}])",                       // developer needs content
      R"([{"role":"user","content":"x","task":"nope"}])",             // invalid task
      R"([{"role":"user","content":[{"type":"text","text":"x"}]}])",  // list content
      R"([{"role":"user","content":null}])",                          // None content
      R"([{"role":"assistant","tool_calls":[{"function":{"name":"f"}}]}])",  // no arguments
      R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}])",  // not
                                                                                               // an
                                                                                               // object
      R"([{"role":"system","tools":[{"type":"function"}]}])",  // tool without function
  };
  for (const char* m : kBad) EXPECT_FALSE(EncodeMessages(Json::parse(m), chat).ok()) << m;
  EXPECT_FALSE(EncodeMessages(Json::parse(R"([{"role":"user","content":"x"}])"), bad_effort).ok());
  EXPECT_FALSE(ParseThinkingMode("auto").ok());
  // Like the reference, an empty list renders just BOS.
  EXPECT_EQ(*EncodeMessages(Json::array(), chat), "<｜begin▁of▁sentence｜>");
}

TEST(ChatEncodingTest, NonStringArgumentsBecomeOneArgumentsParameter) {
  EncodeOptions chat;
  const Json m = Json::parse(R"([{"role":"assistant","content":"","tool_calls":[
      {"function":{"name":"f","arguments":{"k":[1,"x"]}}}]}])");
  EXPECT_EQ(*EncodeMessages(m, chat),
            "<｜begin▁of▁sentence｜>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"arguments\" string=\"false\">{\"k\": [1, "
            "\"x\"]}</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>");
}

TEST(ChatEncodingTest, OpenAiEffortMapping) {
  EXPECT_TRUE(MapOpenAiReasoningEffort("none")->force_chat);
  EXPECT_FALSE(MapOpenAiReasoningEffort("low")->effort.has_value());
  EXPECT_FALSE(MapOpenAiReasoningEffort("medium")->effort.has_value());
  EXPECT_EQ(MapOpenAiReasoningEffort("high")->effort, "high");
  EXPECT_EQ(MapOpenAiReasoningEffort("xhigh")->effort, "max");
  EXPECT_EQ(MapOpenAiReasoningEffort("max")->effort, "max");
  EXPECT_FALSE(MapOpenAiReasoningEffort("extreme").ok());
}

}  // namespace
}  // namespace dsv4::text
