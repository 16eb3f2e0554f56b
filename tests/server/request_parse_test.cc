#include "server/request_parse.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server_fixture.h"

namespace dsv4::server::testing {
namespace {

ParsedRequest Chat(const std::string& body) {
  ParsedRequest out;
  ServerOptions o;
  auto e = ParseChatRequest(Json::parse(body), V4Tokenizer(), o, &out);
  EXPECT_FALSE(e.has_value()) << (e ? e->message : "");
  return out;
}

TEST(RequestParse, ThinkingPrecedence) {
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(Chat("{" + m + "}").thinking_mode, text::ThinkingMode::kChat);
  EXPECT_EQ(Chat("{" + m + R"(,"reasoning_effort":"high"})").thinking_mode,
            text::ThinkingMode::kThinking);
  EXPECT_EQ(Chat("{" + m + R"(,"reasoning_effort":"none"})").thinking_mode,
            text::ThinkingMode::kChat);
  EXPECT_EQ(Chat("{" + m +
                 R"(,"reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false}})")
                .thinking_mode,
            text::ThinkingMode::kChat);  // an explicit enable_thinking wins
  EXPECT_EQ(Chat("{" + m + R"(,"chat_template_kwargs":{"thinking":true}})").thinking_mode,
            text::ThinkingMode::kThinking);
  EXPECT_EQ(Chat("{" + m + R"(,"chat_template_kwargs":{"thinking":true,"enable_thinking":false}})")
                .thinking_mode,
            text::ThinkingMode::kChat);
  EXPECT_EQ(Chat("{" + m + R"(,"thinking":{"type":"enabled"}})").thinking_mode,
            text::ThinkingMode::kThinking);
}

TEST(RequestParse, SamplingFieldsAndDefaults) {
  const ParsedRequest r = Chat(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
          "temperature":0.7,"top_p":0.9,"top_k":5,"min_p":0.1,"seed":42,"presence_penalty":0.5,
          "frequency_penalty":0.25,"repetition_penalty":1.1,"n":3,"logprobs":true,"top_logprobs":2,
          "stop":["x","y"],"stop_token_ids":[7],"ignore_eos":true})");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 0.25f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{7}));
  // Content parts are flattened: same prompt as the plain string "ab".
  EXPECT_EQ(r.prompts[0], Chat(R"({"messages":[{"role":"user","content":"ab"}]})").prompts[0]);
  // max_tokens defaults to the rest of the context.
  EXPECT_EQ(r.max_tokens,
            ServerOptions{}.max_model_len - static_cast<int64_t>(r.prompts[0].size()));
}

TEST(RequestParse, LogitBias) {
  const std::string m = R"("messages":[{"role":"user","content":"a"}])";
  const ParsedRequest r = Chat("{" + m + R"(,"logit_bias":{"5":-100,"42":2.5,"7":100}})");
  auto bias = r.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 100.0f}, {42, 2.5f}}));
  EXPECT_TRUE(Chat("{" + m + R"(,"logit_bias":{}})").sampling.logit_bias.empty());
  EXPECT_TRUE(Chat("{" + m + "}").sampling.logit_bias.empty());
}

TEST(RequestParse, ReasoningRoundTripsAndToolsGoToTheSystemMessage) {
  Json out;
  const Json msgs = Json::parse(
      R"([{"role":"user","content":"q"},
          {"role":"assistant","content":null,"reasoning":"r",
           "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
          {"role":"tool","tool_call_id":"c1","content":"ok"}])");
  const Json tools =
      Json::parse(R"([{"type":"function","function":{"name":"f","parameters":{}}}])");
  ASSERT_FALSE(ConvertMessages(msgs, &tools, &out).has_value());
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0]["role"], "system");
  EXPECT_EQ(out[0]["tools"], tools);
  EXPECT_EQ(out[2]["reasoning_content"], "r");
  EXPECT_EQ(out[2]["content"], "");
  EXPECT_EQ(out[3]["tool_call_id"], "c1");
  const Json dup = Json::parse(
      R"([{"role":"assistant","content":"","tool_calls":[
            {"id":"c","type":"function","function":{"name":"f","arguments":"{}"}},
            {"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}])");
  EXPECT_TRUE(ConvertMessages(dup, nullptr, &out).has_value());
}

// Every bound of docs/server.md "Input limits": at the limit accepted, one
// over it a 400 naming the field.
std::optional<ApiError> ParseWith(const ServerOptions& o, const std::string& text, bool chat) {
  Json body;
  if (auto e = ParseRequestBody(text, o, &body)) return e;
  ParsedRequest out;
  return chat ? ParseChatRequest(body, V4Tokenizer(), o, &out)
              : ParseCompletionRequest(body, V4Tokenizer(), o, &out);
}

std::string List(int n, const std::string& item) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + item;
  return s + "]";
}

void ExpectOk(const std::optional<ApiError>& e) { EXPECT_FALSE(e) << (e ? e->message : ""); }

void ExpectBad(const std::optional<ApiError>& e, const std::string& param) {
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->http_status, 400);
  EXPECT_EQ(e->param, param) << e->message;
}

// vLLM's min_tokens and include_stop_str_in_output; the server's defaults
// (--generation-config) fill only the fields a request leaves out.
TEST(RequestParse, MinTokensStopStringsAndGenerationDefaults) {
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  const ParsedRequest r =
      Chat("{" + m + R"(,"min_tokens":3,"max_tokens":8,"include_stop_str_in_output":true})");
  EXPECT_EQ(r.sampling.min_tokens, 3);
  EXPECT_TRUE(r.include_stop_str_in_output);
  EXPECT_EQ(Chat("{" + m + "}").sampling.min_tokens, 0);
  EXPECT_FALSE(Chat("{" + m + "}").include_stop_str_in_output);

  ServerOptions o;
  ParsedRequest out;
  auto parse = [&](const std::string& body) {
    out = ParsedRequest{};
    return ParseChatRequest(Json::parse(body), V4Tokenizer(), o, &out);
  };
  ExpectBad(parse("{" + m + R"(,"min_tokens":9,"max_tokens":8})"), "min_tokens");
  ExpectBad(parse("{" + m + R"(,"min_tokens":-1})"), "min_tokens");
  ExpectBad(parse("{" + m + R"(,"include_stop_str_in_output":1})"), "include_stop_str_in_output");

  o.default_sampling.temperature = 0.6f;
  o.default_sampling.top_p = 0.95f;
  o.default_sampling.top_k = 20;
  o.default_max_tokens = 5;
  ExpectOk(parse("{" + m + R"(,"top_p":0.5,"top_k":-1})"));
  EXPECT_FLOAT_EQ(out.sampling.temperature, 0.6f);  // the default
  EXPECT_FLOAT_EQ(out.sampling.top_p, 0.5f);        // the request's own
  EXPECT_EQ(out.sampling.top_k, 0);                 // -1: off, over the default
  EXPECT_EQ(out.max_tokens, 5);                     // max_new_tokens caps the chat default
  ExpectOk(parse("{" + m + R"(,"temperature":0,"max_tokens":7})"));
  EXPECT_FLOAT_EQ(out.sampling.temperature, 0.0f);
  EXPECT_EQ(out.max_tokens, 7);
  ExpectOk(ParseWith(o, R"({"prompt":"x"})", /*chat=*/false));
}

TEST(RequestParse, InputLimits) {
  ServerOptions o;
  RequestLimits& l = o.limits;
  l.max_json_depth = 6;
  l.max_json_object_members = 3;
  l.max_json_array_elements = 5;
  l.max_messages = 2;
  l.max_tools = 1;
  l.max_stop_strings = 2;
  l.max_stop_bytes = 3;
  l.max_stop_token_ids = 2;
  l.max_choices = 4;
  const std::string user = R"({"role":"user","content":"x"})";
  const std::string m1 = R"("messages":)" + List(1, user);
  // JSON structure: depth 6 = body, messages, message, content parts, part... .
  ExpectOk(ParseWith(o, R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]})",
                     true));
  ExpectOk(ParseWith(o, "{" + m1 + R"(,"chat_template_kwargs":{"a":{"b":{"c":{"d":1}}}}})", true));
  ExpectBad(
      ParseWith(o, "{" + m1 + R"(,"logit_bias":{"1":{"a":{"b":{"c":{"d":{"e":1}}}}}}})", true),
      "logit_bias.1.a.b.c.d");
  ExpectOk(ParseWith(o, R"({"prompt":[1,2,3,4,5]})", false));
  ExpectBad(ParseWith(o, R"({"prompt":[1,2,3,4,5,6]})", false), "prompt");
  ExpectBad(ParseWith(o, "{" + m1 + R"(,"logit_bias":{"1":1,"2":1,"3":1,"4":1}})", true),
            "logit_bias");
  // Counts.
  ExpectOk(ParseWith(o, R"({"messages":)" + List(2, user) + "}", true));
  ExpectBad(ParseWith(o, R"({"messages":)" + List(3, user) + "}", true), "messages");
  const std::string tool = R"({"type":"function","function":{"name":"f"}})";
  ExpectOk(ParseWith(o, "{" + m1 + R"(,"tools":)" + List(1, tool) + "}", true));
  ExpectBad(ParseWith(o,
                      "{" + m1 + R"(,"tools":[)" + tool + "," +
                          R"({"type":"function","function":{"name":"g"}}]})",
                      true),
            "tools");
  ExpectOk(ParseWith(o, "{" + m1 + R"(,"stop":["abc","d"]})", true));
  ExpectBad(ParseWith(o, "{" + m1 + R"(,"stop":["a","b","c"]})", true), "stop");
  ExpectBad(ParseWith(o, "{" + m1 + R"(,"stop":"abcd"})", true), "stop");
  ExpectOk(ParseWith(o, "{" + m1 + R"(,"stop_token_ids":[5,6]})", true));
  ExpectBad(ParseWith(o, "{" + m1 + R"(,"stop_token_ids":[5,6,7]})", true), "stop_token_ids");
  ExpectOk(ParseWith(o, R"({"prompt":["a","b"],"n":2,"max_tokens":1})", false));
  ExpectBad(ParseWith(o, R"({"prompt":["a","b"],"n":3,"max_tokens":1})", false), "prompt");
  ExpectBad(ParseWith(o, "{" + m1 + R"(,"n":5})", true), "n");
  // Tool-call arguments are a JSON document of their own, under the same limits.
  auto call = [&](const std::string& args) {
    return R"({"messages":[)" + user +
           R"(,{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",)"
           R"("function":{"name":"f","arguments":)" +
           Json(args).dump() + "}}]}]}";
  };
  ExpectOk(ParseWith(o, call(R"({"a":{"b":{"c":{"d":{"e":{}}}}}})"), true));
  ExpectBad(ParseWith(o, call(R"({"a":{"b":{"c":{"d":{"e":{"f":{}}}}}}})"), true),
            "messages[1].tool_calls[0].function.arguments");
  ExpectBad(ParseWith(o, call(R"({"a":1,"b":2,"c":3,"d":4})"), true),
            "messages[1].tool_calls[0].function.arguments");
  ExpectBad(ParseWith(o, call("[1]"), true), "messages[1].tool_calls[0].function.arguments");
  // Syntax errors name the byte; they are not limits.
  const auto syntax = ParseWith(o, R"({"prompt": x})", false);
  ASSERT_TRUE(syntax.has_value());
  EXPECT_EQ(syntax->param, "");
  EXPECT_NE(syntax->message.find("not valid JSON: byte "), std::string::npos) << syntax->message;
}

}  // namespace
}  // namespace dsv4::server::testing
