// The `dsv4 generate` driver against a scripted engine: multi-token steps
// (as MTP produces them), stop strings inside a step, finish reasons,
// speculation counters and refused submissions.
#include "generate_driver.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <sstream>

namespace dsv4::cli {
namespace {

// Replays a script of outputs per request at Submit time (all queued before
// the driver reads any).  Abort delivers a final kAbort unless the script
// already finished the request.
class ScriptedEngine : public AsyncEngine {
 public:
  explicit ScriptedEngine(std::vector<std::vector<GenerationOutput>> scripts)
      : scripts_(std::move(scripts)) {}

  Result<RequestId> Submit(GenerationRequest request, OutputCallback on_output) override {
    const size_t index = submitted_.size();
    if (index == refuse_at_) return InvalidArgument("refused");
    const RequestId id = static_cast<RequestId>(100 + index);
    submitted_.push_back(std::move(request));
    callbacks_[id] = on_output;
    bool finished = false;
    for (GenerationOutput out : scripts_[index]) {
      out.id = id;
      finished = finished || out.finish != FinishReason::kNone;
      on_output(out);
    }
    finished_[id] = finished;
    return id;
  }
  void Abort(RequestId id) override {
    aborted_.push_back(id);
    if (!finished_[id]) {
      finished_[id] = true;
      GenerationOutput out;
      out.id = id;
      out.finish = FinishReason::kAbort;
      callbacks_[id](out);
    }
  }
  EngineStats Stats() const override { return {}; }
  bool Ready() const override { return true; }
  void Shutdown() override {}

  size_t refuse_at_ = SIZE_MAX;
  std::vector<GenerationRequest> submitted_;
  std::vector<RequestId> aborted_;

 private:
  std::vector<std::vector<GenerationOutput>> scripts_;
  std::map<RequestId, OutputCallback> callbacks_;
  std::map<RequestId, bool> finished_;
};

GenerationOutput Step(std::vector<int32_t> tokens, int32_t drafts = 0, int32_t accepted = 0,
                      FinishReason finish = FinishReason::kNone) {
  GenerationOutput out;
  out.new_tokens = std::move(tokens);
  out.num_draft_tokens = drafts;
  out.num_accepted_tokens = accepted;
  out.finish = finish;
  return out;
}

class GenerateDriverTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = text::Tokenizer::Load(std::string(DSV4_TEST_DATA_DIR) +
                                   "/tokenizer/deepseek_v3_tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.status().message();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  static std::vector<int32_t> Ids(const std::string& text) { return tokenizer_->Encode(text); }

  GenerateJob Job(size_t num_prompts) const {
    GenerateJob job;
    job.prompts.assign(num_prompts, {5, 6, 7});
    job.tokenizer = tokenizer_;
    job.eos_token_id = 1;
    job.config.max_new_tokens = 50;
    return job;
  }

  static text::Tokenizer* tokenizer_;
};
text::Tokenizer* GenerateDriverTest::tokenizer_ = nullptr;

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
  EXPECT_EQ(engine.aborted_, (std::vector<RequestId>{100}));
  // Counters cover the steps up to the stop; the later step is not ours.
  EXPECT_EQ(stats.num_verify_steps, 1);
  EXPECT_EQ(stats.num_draft_tokens, 2);
  EXPECT_EQ(stats.num_accepted_tokens, 2);
  EXPECT_EQ(stats.num_tokens, 3);
}

TEST_F(GenerateDriverTest, SubmitsTheConfiguredRequests) {
  ScriptedEngine engine(
      {{Step({}, 0, 0, FinishReason::kLength)}, {Step({}, 0, 0, FinishReason::kLength)}});
  GenerateJob job = Job(2);
  job.prompts[1] = {8, 9};
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
      {Step({ids[0], 1}, 0, 0, FinishReason::kStop)},
      {Step({ids[0], 9}, 0, 0, FinishReason::kStop)},
      {Step({ids[0]}), Step({ids[1]}, 0, 0, FinishReason::kLength)},
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
  ScriptedEngine engine2({{Step({ids[0], 1}, 0, 0, FinishReason::kStop)}});
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
  EXPECT_EQ(engine.aborted_, (std::vector<RequestId>{100, 101}));
}

}  // namespace
}  // namespace dsv4::cli
