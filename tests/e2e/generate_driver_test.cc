// The `dsv4 generate` driver against a scripted engine: multi-token steps
// (as MTP produces them), stop strings inside a step, finish reasons,
// speculation counters, refused submissions, and chat prompts decoded and
// printed as the server parses them (reasoning, content, DSML tool calls).
#include "generate_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <sstream>

#include "chat_prompt.h"
#include "generate_output.h"

namespace dsv4::cli {
namespace {

// Replays a script of outputs per request at Submit time (all queued before
// the driver reads any).  Abort delivers a final kAbort unless the script
// already finished the request.
class ScriptedEngine : public engine::AsyncEngine {
 public:
  explicit ScriptedEngine(std::vector<std::vector<engine::GenerationOutput>> scripts)
      : scripts_(std::move(scripts)) {}

  Result<engine::RequestId> Submit(engine::GenerationRequest request,
                                   OutputCallback on_output) override {
    const size_t index = submitted_.size();
    if (index == refuse_at_) return InvalidArgument("refused");
    const engine::RequestId id = static_cast<engine::RequestId>(100 + index);
    submitted_.push_back(std::move(request));
    callbacks_[id] = on_output;
    bool finished = false;
    for (engine::GenerationOutput out : scripts_[index]) {
      out.id = id;
      finished = finished || out.finish != engine::FinishReason::kNone;
      on_output(out);
    }
    finished_[id] = finished;
    return id;
  }
  void Abort(engine::RequestId id) override {
    aborted_.push_back(id);
    if (!finished_[id]) {
      finished_[id] = true;
      engine::GenerationOutput out;
      out.id = id;
      out.finish = engine::FinishReason::kAbort;
      callbacks_[id](out);
    }
  }
  engine::EngineStats Stats() const override { return {}; }
  bool Ready() const override { return true; }
  void Shutdown() override {}

  size_t refuse_at_ = SIZE_MAX;
  std::vector<engine::GenerationRequest> submitted_;
  std::vector<engine::RequestId> aborted_;

 private:
  std::vector<std::vector<engine::GenerationOutput>> scripts_;
  std::map<engine::RequestId, OutputCallback> callbacks_;
  std::map<engine::RequestId, bool> finished_;
};

engine::GenerationOutput Step(std::vector<int32_t> tokens, int32_t drafts = 0, int32_t accepted = 0,
                              engine::FinishReason finish = engine::FinishReason::kNone) {
  engine::GenerationOutput out;
  out.new_tokens = std::move(tokens);
  out.num_draft_tokens = drafts;
  out.num_accepted_tokens = accepted;
  out.finish = finish;
  return out;
}

class GenerateDriverTest : public ::testing::Test {
 protected:
  // The V4-equivalent test tokenizer (with the <think>, </think> and ｜DSML｜
  // ids chat output needs), as the server tests use.
  static void SetUpTestSuite() {
    const std::string dir = std::string(DSV4_TEST_DATA_DIR) + "/tokenizer/";
    auto t = text::Tokenizer::Load(dir + "deepseek_v3_tokenizer.json",
                                   dir + "v4_known_added_tokens.json");
    ASSERT_TRUE(t.ok()) << t.status().message();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  static std::vector<int32_t> Ids(const std::string& text) { return tokenizer_->Encode(text); }

  GenerateJob Job(size_t num_prompts) const {
    GenerateJob job;
    job.prompts.assign(num_prompts, Plain({5, 6, 7}));
    job.tokenizer = tokenizer_;
    job.eos_token_id = 1;
    job.config.max_new_tokens = 50;
    return job;
  }

  static GeneratePrompt Plain(std::vector<int32_t> ids) {
    GeneratePrompt p;
    p.ids = std::move(ids);
    return p;
  }

  // A chat prompt parsed by the server's parser from a request body.
  static GeneratePrompt ChatPrompt(const std::string& body, bool thinking_default = false) {
    server::ServerOptions options;
    options.default_thinking = thinking_default;
    auto parsed = ChatBodyRequest(body, GenerateConfig{}, *tokenizer_, options);
    EXPECT_TRUE(parsed.ok()) << parsed.status().message();
    GeneratePrompt p;
    p.ids = parsed->prompts.at(0);
    p.chat = std::move(*parsed);
    return p;
  }

  // The output as `per_step`-token steps (accepted MTP drafts), the last one
  // carrying `last`.
  static std::vector<engine::GenerationOutput> Steps(const std::vector<int32_t>& ids,
                                                     size_t per_step, engine::FinishReason last) {
    std::vector<engine::GenerationOutput> steps;
    for (size_t i = 0; i < ids.size(); i += per_step) {
      const size_t end = std::min(ids.size(), i + per_step);
      const auto n = static_cast<int32_t>(end - i);
      steps.push_back(
          Step({ids.begin() + static_cast<ptrdiff_t>(i), ids.begin() + static_cast<ptrdiff_t>(end)},
               n - 1, n - 1, end == ids.size() ? last : engine::FinishReason::kNone));
    }
    return steps;
  }

  static std::string TokenLine(const std::vector<int32_t>& ids) {
    std::vector<int32_t> head(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 64));
    return fmt::format("token_ids: [{}]{}\n", fmt::join(head, ", "),
                       ids.size() > 64 ? fmt::format("... ({} tokens)", ids.size()) : "");
  }

  static text::Tokenizer* tokenizer_;
};
text::Tokenizer* GenerateDriverTest::tokenizer_ = nullptr;

// A chat request as a client would send it: a tool, thinking on.
const char* kToolRequest =
    R"({"messages":[{"role":"user","content":"Weather in Paris?"}],
        "tools":[{"type":"function","function":{"name":"get_weather","parameters":
          {"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}}],
        "chat_template_kwargs":{"thinking":true}})";

// A thinking answer that ends in a DSML tool call, as V4 writes it.
const char* kToolAnswer =
    "Let me check.</think>Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls><｜end▁of▁sentence｜>";

TEST_F(GenerateDriverTest, StopStringInsideAMultiTokenStepCutsTheStep) {
  const std::vector<int32_t> ids = Ids(" alpha beta gamma delta epsilon");
  ASSERT_GE(ids.size(), 5u);
  // One 3-token MTP step completes " gamma" in its middle token.
  ScriptedEngine engine(
      {{Step({ids[0]}), Step({ids[1], ids[2], ids[3]}, 2, 2), Step({ids[4]}, 2, 0)}});
  GenerateJob job = Job(1);
  job.config.stop = {" gamma"};
  std::ostringstream streamed;
  job.stream = &streamed;
  GenerateStats stats;
  auto results = RunGenerate(engine, job, &stats);
  ASSERT_TRUE(results.ok()) << results.status().message();
  const PromptResult& r = (*results)[0];
  EXPECT_EQ(r.finish, "stop");
  EXPECT_EQ(r.text, " alpha beta");
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{ids[0], ids[1], ids[2]}));
  EXPECT_EQ(streamed.str(), " alpha beta");
  EXPECT_EQ(engine.aborted_, (std::vector<engine::RequestId>{100}));
  // Counters cover the steps up to the stop; the later step is not ours.
  EXPECT_EQ(stats.num_verify_steps, 1);
  EXPECT_EQ(stats.num_draft_tokens, 2);
  EXPECT_EQ(stats.num_accepted_tokens, 2);
  EXPECT_EQ(stats.num_tokens, 3);
}

TEST_F(GenerateDriverTest, SubmitsTheConfiguredRequests) {
  ScriptedEngine engine({{Step({}, 0, 0, engine::FinishReason::kLength)},
                         {Step({}, 0, 0, engine::FinishReason::kLength)}});
  GenerateJob job = Job(2);
  job.prompts[1].ids = {8, 9};
  job.config.stop_token_ids = {9};
  job.config.max_new_tokens = 7;
  job.config.sampling.temperature = 0.5f;
  job.config.sampling.seed = 3;
  GenerateStats stats;
  ASSERT_TRUE(RunGenerate(engine, job, &stats).ok());
  ASSERT_EQ(engine.submitted_.size(), 2u);
  EXPECT_EQ(engine.submitted_[0].prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(engine.submitted_[1].prompt, (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(engine.submitted_[1].max_tokens, 7);
  EXPECT_EQ(engine.submitted_[1].stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(engine.submitted_[1].sampling.temperature, 0.5f);
  EXPECT_EQ(engine.submitted_[1].sampling.seed, 3u);
}

TEST_F(GenerateDriverTest, EosStopTokenAndLength) {
  const std::vector<int32_t> ids = Ids(" one two");
  ScriptedEngine engine({
      {Step({ids[0], 1}, 0, 0, engine::FinishReason::kStop)},
      {Step({ids[0], 9}, 0, 0, engine::FinishReason::kStop)},
      {Step({ids[0]}), Step({ids[1]}, 0, 0, engine::FinishReason::kLength)},
  });
  GenerateJob job = Job(3);
  job.config.stop_token_ids = {9};
  GenerateStats stats;
  auto results = RunGenerate(engine, job, &stats);
  ASSERT_TRUE(results.ok()) << results.status().message();
  EXPECT_EQ((*results)[0].finish, "eos");
  EXPECT_EQ((*results)[0].text, " one");  // EOS is special: no text
  EXPECT_EQ((*results)[1].finish, "stop");
  EXPECT_EQ((*results)[2].finish, "length");
  EXPECT_EQ((*results)[2].text, " one two");
  EXPECT_TRUE(engine.aborted_.empty());
  EXPECT_EQ(stats.num_tokens, 6);
  // With ignore_eos an EOS-terminated output would be a stop token.
  ScriptedEngine engine2({{Step({ids[0], 1}, 0, 0, engine::FinishReason::kStop)}});
  job = Job(1);
  job.config.sampling.ignore_eos = true;
  results = RunGenerate(engine2, job, &stats);
  ASSERT_TRUE(results.ok());
  EXPECT_EQ((*results)[0].finish, "stop");
}

TEST_F(GenerateDriverTest, ARefusedSubmissionAbortsTheOthers) {
  const std::vector<int32_t> ids = Ids(" one");
  ScriptedEngine engine({{Step({ids[0]})}, {Step({ids[0]})}, {}});
  engine.refuse_at_ = 2;
  GenerateStats stats;
  auto results = RunGenerate(engine, Job(3), &stats);
  ASSERT_FALSE(results.ok());
  EXPECT_EQ(results.status().message(), "prompt 3: refused");
  EXPECT_EQ(engine.aborted_, (std::vector<engine::RequestId>{100, 101}));
}

TEST_F(GenerateDriverTest, ChatToolCallIsPrintedAsTheServerParsesIt) {
  // One plain and one chat prompt in the same run (batched together).
  GenerateJob job;
  job.tokenizer = tokenizer_;
  job.eos_token_id = 1;
  job.prompts.push_back(Plain({5, 6, 7}));
  job.prompts.push_back(ChatPrompt(kToolRequest));
  job.prompts[1].label = "weather.json";
  const std::vector<int32_t> plain = tokenizer_->Encode(" one two");
  const std::vector<int32_t> answer = tokenizer_->Encode(kToolAnswer);
  ASSERT_EQ(answer.back(), 1);
  ScriptedEngine engine({Steps(plain, 1, engine::FinishReason::kLength),
                         Steps(answer, 3, engine::FinishReason::kStop)});
  GenerateStats stats;
  auto results = RunGenerate(engine, job, &stats);
  ASSERT_TRUE(results.ok()) << results.status().message();
  // Thinking mode: the submitted prompt ends with <think>.
  ASSERT_EQ(engine.submitted_.size(), 2u);
  EXPECT_EQ(engine.submitted_[1].prompt.back(), *tokenizer_->TokenId("<think>"));
  EXPECT_EQ(engine.submitted_[1].max_tokens, 256);
  const PromptResult& r = (*results)[1];
  EXPECT_EQ(r.finish, "tool_calls");
  EXPECT_TRUE(engine.aborted_.empty());

  std::ostringstream os;
  PrintResults(os, *results, job, stats, 2);
  const std::string expected =
      "-- prompt 1/2 --\n"
      "text: \" one two\"\n" +
      TokenLine(plain) +
      "finish_reason: length\n"
      "-- prompt 2/2 (weather.json) --\n"
      "reasoning: \"Let me check.\"\n"
      "content: \"Sure.\"\n"
      "tool_calls: 1\n"
      "  get_weather {\"city\": \"Paris\", \"days\": 3}\n" +
      TokenLine(answer) + "finish_reason: tool_calls\n";
  const std::string printed = os.str();
  ASSERT_EQ(printed.substr(0, expected.size()), expected) << printed;
  // Steps that carried drafts: those of 2 or 3 tokens.
  const size_t steps = answer.size() / 3 + (answer.size() % 3 == 2 ? 1 : 0);
  EXPECT_NE(printed.find(fmt::format("[generate] {} tokens in ", plain.size() + answer.size())),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find(fmt::format("[generate] mtp K=2: {} drafts", steps)), std::string::npos)
      << printed;
}

TEST_F(GenerateDriverTest, ChatStreamingPrintsEachSectionUnderItsHeader) {
  GenerateJob job;
  job.tokenizer = tokenizer_;
  job.prompts.push_back(ChatPrompt(kToolRequest));
  std::ostringstream streamed;
  job.stream = &streamed;
  ScriptedEngine engine({Steps(tokenizer_->Encode(kToolAnswer), 2, engine::FinishReason::kStop)});
  GenerateStats stats;
  ASSERT_TRUE(RunGenerate(engine, job, &stats).ok());
  EXPECT_EQ(streamed.str(),
            "reasoning: Let me check.\ncontent: Sure.\n"
            "tool_call: get_weather {\"city\": \"Paris\", \"days\": 3}");
}

TEST_F(GenerateDriverTest, ChatStopStringsCutTheContentOnly) {
  // As on the server: stop strings apply to the content, not the reasoning.
  std::string body = kToolRequest;
  body.insert(body.size() - 1, R"(,"stop":["check","ure"])");
  GenerateJob job;
  job.tokenizer = tokenizer_;
  job.prompts.push_back(ChatPrompt(body));
  ScriptedEngine engine({Steps(tokenizer_->Encode(kToolAnswer), 1, engine::FinishReason::kStop)});
  GenerateStats stats;
  auto results = RunGenerate(engine, job, &stats);
  ASSERT_TRUE(results.ok()) << results.status().message();
  const PromptResult& r = (*results)[0];
  EXPECT_EQ(r.reasoning_content, "Let me check.");
  EXPECT_EQ(r.content, "S");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.finish, "stop");
  EXPECT_EQ(engine.aborted_, (std::vector<engine::RequestId>{100}));
}

TEST_F(GenerateDriverTest, ChatMinTokensAndIncludeStopThroughTheServersDecoder) {
  // The stop string "an" first appears inside "and": with min_tokens
  // covering those tokens it is not a stop, the next "an" is, and
  // include_stop_str_in_output keeps it.  Three tokens per step, so the
  // unsearched boundary falls inside a step.
  const std::string answer = "An apple and an orange, and a banana.";
  const std::vector<int32_t> ids = tokenizer_->Encode(answer);
  size_t covered = 0;  // tokens until the text first contains "an"
  while (tokenizer_->Decode({ids.begin(), ids.begin() + static_cast<ptrdiff_t>(covered)}, false)
             .find("an") == std::string::npos) {
    ++covered;
  }
  const std::string early =
      tokenizer_->Decode({ids.begin(), ids.begin() + static_cast<ptrdiff_t>(covered)}, false);
  const size_t stop_at = answer.find("an", early.size());
  ASSERT_NE(stop_at, std::string::npos);
  const std::string body = fmt::format(
      R"({{"messages":[{{"role":"user","content":"Fruit?"}}],"stop":["an"],"min_tokens":{},)"
      R"("include_stop_str_in_output":true}})",
      covered);
  GenerateJob job;
  job.tokenizer = tokenizer_;
  job.prompts.push_back(ChatPrompt(body));
  ScriptedEngine engine({Steps(ids, 3, engine::FinishReason::kStop)});
  GenerateStats stats;
  auto results = RunGenerate(engine, job, &stats);
  ASSERT_TRUE(results.ok()) << results.status().message();
  EXPECT_EQ((*results)[0].content, answer.substr(0, stop_at + 2));
  EXPECT_EQ((*results)[0].finish, "stop");
  EXPECT_EQ(engine.submitted_[0].sampling.min_tokens, static_cast<int32_t>(covered));
  // Without min_tokens the first "an" stops it, and without
  // include_stop_str_in_output the stop string is cut.
  GenerateJob plain;
  plain.tokenizer = tokenizer_;
  plain.prompts.push_back(
      ChatPrompt(R"({"messages":[{"role":"user","content":"Fruit?"}],"stop":["an"]})"));
  ScriptedEngine engine2({Steps(ids, 3, engine::FinishReason::kStop)});
  results = RunGenerate(engine2, plain, &stats);
  ASSERT_TRUE(results.ok());
  EXPECT_EQ((*results)[0].content, answer.substr(0, answer.find("an")));
}

TEST_F(GenerateDriverTest, MalformedChatOutputIsAnErrorWithTheRawText) {
  GenerateJob job;
  job.tokenizer = tokenizer_;
  job.prompts.push_back(ChatPrompt(R"({"messages":[{"role":"user","content":"Hi"}]})"));
  // A DSML marker outside a tag: the parser refuses it, the request is aborted.
  const std::vector<int32_t> ids = tokenizer_->Encode("Hi ｜DSML｜ there and more");
  ScriptedEngine engine({Steps(ids, 2, engine::FinishReason::kLength)});
  GenerateStats stats;
  auto results = RunGenerate(engine, job, &stats);
  ASSERT_TRUE(results.ok()) << results.status().message();
  const PromptResult& r = (*results)[0];
  EXPECT_EQ(r.finish, "error");
  EXPECT_FALSE(r.error.ok());
  EXPECT_EQ(engine.aborted_, (std::vector<engine::RequestId>{100}));
  std::ostringstream os;
  PrintResults(os, *results, job, stats, 0);
  const std::string printed = os.str();
  EXPECT_NE(printed.find("content: \"Hi \"\n"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("reasoning:"), std::string::npos) << printed;   // chat mode
  EXPECT_EQ(printed.find("tool_calls:"), std::string::npos) << printed;  // no tools
  EXPECT_NE(printed.find("text: \"Hi ｜DSML｜"), std::string::npos) << printed;
  EXPECT_NE(printed.find("finish_reason: error ("), std::string::npos) << printed;
}

TEST_F(GenerateDriverTest, AChatPromptNeedsATokenizer) {
  GenerateJob job;
  job.prompts.push_back(ChatPrompt(kToolRequest));
  ScriptedEngine engine(std::vector<std::vector<engine::GenerationOutput>>(1));
  GenerateStats stats;
  auto results = RunGenerate(engine, job, &stats);
  ASSERT_FALSE(results.ok());
  EXPECT_TRUE(engine.submitted_.empty());
}

}  // namespace
}  // namespace dsv4::cli
