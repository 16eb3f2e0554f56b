// `dsv4 generate` chat prompts: --chat texts and --chat-request bodies go
// through the server's parser, with --generate-config filling what a request
// leaves out and --thinking as the server's default thinking mode.
#include "chat_prompt.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace dsv4::cli {
namespace {

using server::Json;

class ChatPromptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/";
    auto v4 = text::Tokenizer::Load(dir + "deepseek_v3_tokenizer.json",
                                    dir + "v4_known_added_tokens.json");
    ASSERT_TRUE(v4.ok()) << v4.status().message();
    v4_ = v4->release();
  }
  static void TearDownTestSuite() { delete v4_; }

  static int32_t Id(const std::string& token) { return *v4_->TokenId(token); }

  Result<server::ParsedRequest> Body(const std::string& body, const GenerateConfig& config = {}) {
    return ChatBodyRequest(body, config, *v4_, options_);
  }
  void ExpectError(const std::string& body, const std::string& part) {
    auto r = Body(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }

  static text::Tokenizer* v4_;
  server::ServerOptions options_;
};
text::Tokenizer* ChatPromptTest::v4_ = nullptr;

const char* kUser = R"("messages":[{"role":"user","content":"Hi"}])";

TEST_F(ChatPromptTest, DefaultsCarryOnlyWhatDiffersPlusMaxTokens) {
  EXPECT_EQ(ChatDefaults(GenerateConfig{}), Json::parse(R"({"max_tokens":256})"));
  GenerateConfig c;
  c.max_new_tokens = 40;
  c.sampling.temperature = 0.5f;
  c.sampling.top_k = 7;
  c.sampling.seed = 3;
  c.sampling.logprobs = 2;
  c.sampling.ignore_eos = true;
  c.stop = {"END"};
  c.stop_token_ids = {9};
  c.reasoning_effort = "high";
  EXPECT_EQ(ChatDefaults(c), Json::parse(R"({"max_tokens":40,"temperature":0.5,"top_k":7,"seed":3,
      "ignore_eos":true,"logprobs":true,"top_logprobs":2,"stop":["END"],"stop_token_ids":[9],
      "reasoning_effort":"high"})"));
}

TEST_F(ChatPromptTest, ABodyKeepsItsChoicesAndGroupsStayWhole) {
  const Json defaults = Json::parse(
      R"({"max_tokens":40,"temperature":0.5,"logprobs":true,"top_logprobs":2,
          "reasoning_effort":"high","seed":3})");
  const Json body = Json::parse(
      R"({"max_completion_tokens":9,"temperature":0.2,"logprobs":false,
          "chat_template_kwargs":{"thinking":false}})");
  EXPECT_EQ(WithDefaults(body, defaults),
            Json::parse(R"({"max_completion_tokens":9,"temperature":0.2,"logprobs":false,
                            "chat_template_kwargs":{"thinking":false},"seed":3})"));
  EXPECT_EQ(WithDefaults(Json::object(), defaults), defaults);
}

TEST_F(ChatPromptTest, ThinkingFollowsTheServersRules) {
  GenerateConfig config;
  // --chat without --thinking: chat mode, the prompt ends with </think>.
  auto chat = ChatTextRequest("Hi", config, *v4_, options_);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(chat->thinking_mode, text::ThinkingMode::kChat);
  EXPECT_EQ(chat->prompts.at(0).back(), Id("</think>"));
  EXPECT_EQ(chat->max_tokens, 256);
  // --thinking is the server's default_thinking: the prompt ends with <think>.
  options_.default_thinking = true;
  auto thinking = ChatTextRequest("Hi", config, *v4_, options_);
  ASSERT_TRUE(thinking.ok()) << thinking.status().message();
  EXPECT_EQ(thinking->thinking_mode, text::ThinkingMode::kThinking);
  EXPECT_EQ(thinking->prompts.at(0).back(), Id("<think>"));
  // A request's own choice wins over the default; so does effort "none".
  auto off = Body(std::string("{") + kUser + R"(,"thinking":{"type":"disabled"}})");
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_EQ(off->thinking_mode, text::ThinkingMode::kChat);
  config.reasoning_effort = "none";
  auto none = ChatTextRequest("Hi", config, *v4_, options_);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->thinking_mode, text::ThinkingMode::kChat);
  // Without the default, an effort turns thinking on (as on the server).
  options_.default_thinking = false;
  config.reasoning_effort = "high";
  auto high = ChatTextRequest("Hi", config, *v4_, options_);
  ASSERT_TRUE(high.ok()) << high.status().message();
  EXPECT_EQ(high->thinking_mode, text::ThinkingMode::kThinking);
}

TEST_F(ChatPromptTest, TheBodyWinsOverTheGenerateConfig) {
  GenerateConfig config;
  config.max_new_tokens = 30;
  config.sampling.temperature = 0.9f;
  config.sampling.seed = 5;
  config.stop = {"X"};
  auto r = Body(std::string("{") + kUser + R"(,"temperature":0.3,"max_tokens":12,"stop":"Y",
      "tools":[{"type":"function","function":{"name":"get_weather"}}]})",
                config);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->sampling.temperature, 0.3f);
  EXPECT_EQ(r->max_tokens, 12);
  EXPECT_EQ(r->stop, std::vector<std::string>{"Y"});
  EXPECT_EQ(r->sampling.seed, 5u);  // not in the body: the config's
  EXPECT_TRUE(r->parse_tool_calls);
  EXPECT_EQ(r->tool_names, std::vector<std::string>{"get_weather"});
  r = Body(std::string("{") + kUser + "}", config);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_tokens, 30);
  EXPECT_EQ(r->stop, std::vector<std::string>{"X"});
}

TEST_F(ChatPromptTest, BadRequestsAreOneLineErrors) {
  ExpectError(R"({"messages":[)", "the request body is not valid JSON");
  ExpectError("[]", "must be a JSON object");
  ExpectError(R"({"messages":[]})", "messages");
  ExpectError(std::string("{") + kUser + R"(,"foo":1})", "foo");
  ExpectError(std::string("{") + kUser + R"(,"model":"other"})", "does not exist");
  ExpectError(std::string("{") + kUser + R"(,"temperature":"hot"})", "temperature");
  ExpectError(std::string("{") + kUser + R"(,"stream":true})", "\"stream\": true is not supported");
  ExpectError(std::string("{") + kUser + R"(,"n":2})", "\"n\" must be 1");
  ExpectError(std::string("{") + kUser +
                  R"(,"tools":[{"type":"function","function":{"name":"f"}}],
                     "tool_choice":"required"})",
              "tool_choice");
  ExpectError(std::string("{") + kUser + R"(,"max_tokens":5000})", "maximum context length");
  // The served name is the model directory's, as for `dsv4 serve`.
  options_.served_model_name = "dsv4-mini";
  EXPECT_TRUE(Body(std::string("{") + kUser + R"(,"model":"dsv4-mini"})").ok());
}

TEST_F(ChatPromptTest, ATokenizerWithoutTheV4MarkersIsRefused) {
  auto v3 = text::Tokenizer::Load(std::string(DSV4_TEST_DATA_DIR) +
                                  "/tokenizer/deepseek_v3_tokenizer.json");
  ASSERT_TRUE(v3.ok());
  auto r = ChatTextRequest("Hi", GenerateConfig{}, **v3, options_);
  EXPECT_FALSE(r.ok());
}

TEST_F(ChatPromptTest, FilesNameThemselvesInEveryError) {
  const std::string dir = ::testing::TempDir() + "/chat_prompt_test";
  std::filesystem::create_directories(dir);
  const std::string bad = dir + "/bad.json", good = dir + "/good.json";
  std::ofstream(bad) << R"({"messages": [)";
  std::ofstream(good) << std::string("{") + kUser + "}";
  auto r = LoadChatRequest(bad, GenerateConfig{}, *v4_, options_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind(
                "--chat-request " + bad + ": the request body is not valid JSON", 0),
            0u)
      << r.status().message();
  r = LoadChatRequest(dir + "/missing.json", GenerateConfig{}, *v4_, options_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--chat-request " + dir + "/missing.json: cannot open: No such file or directory");
  r = LoadChatRequest(dir, GenerateConfig{}, *v4_, options_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--chat-request " + dir + ": is a directory");
  options_.max_body_bytes = 8;
  r = LoadChatRequest(good, GenerateConfig{}, *v4_, options_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over the request limit of 8 bytes"), std::string::npos);
  options_.max_body_bytes = 1 << 20;
  r = LoadChatRequest(good, GenerateConfig{}, *v4_, options_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->chat);
}

}  // namespace
}  // namespace dsv4::cli
