// `dsv4 generate` helpers: --generate-config / --speculative-config parsing,
// engine flag resolution and stop-string handling of the output text.
#include "generate_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine_flags.h"
#include "generation_defaults.h"
#include "output_text.h"
#include "text/tokenizer.h"

namespace dsv4::cli {
namespace {

TEST(GenerateConfigTest, DefaultsMatchTheReference) {
  auto c = ParseGenerateConfig("{}");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->max_new_tokens, 256);
  EXPECT_EQ(c->sampling.temperature, 0.0f);
  EXPECT_EQ(c->sampling.top_p, 1.0f);
  EXPECT_EQ(c->sampling.top_k, 0);
  EXPECT_FALSE(c->sampling.seed.has_value());
  EXPECT_TRUE(c->stop.empty());
  EXPECT_FALSE(c->stream);
  EXPECT_FALSE(c->sampling.ignore_eos);
  EXPECT_EQ(c->sampling.logprobs, -1);
  EXPECT_FALSE(c->thinking);
}

TEST(GenerateConfigTest, ParsesEveryField) {
  auto c = ParseGenerateConfig(R"({
      "max_new_tokens": 20, "temperature": 1, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
      "seed": 18446744073709551615, "stop": ["\n\n", "END"], "stop_token_ids": [7, 9],
      "presence_penalty": -0.5, "frequency_penalty": 0.25, "repetition_penalty": 1.1,
      "logprobs": 5, "stream": true, "ignore_eos": true, "thinking": true,
      "reasoning_effort": "max"})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->max_new_tokens, 20);
  EXPECT_EQ(c->sampling.temperature, 1.0f);
  EXPECT_EQ(c->sampling.top_p, 0.9f);
  EXPECT_EQ(c->sampling.top_k, 40);
  EXPECT_EQ(c->sampling.min_p, 0.05f);
  EXPECT_EQ(c->sampling.seed, 18446744073709551615ull);
  EXPECT_EQ(c->stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(c->stop_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(c->sampling.presence_penalty, -0.5f);
  EXPECT_EQ(c->sampling.frequency_penalty, 0.25f);
  EXPECT_EQ(c->sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(c->sampling.logprobs, 5);
  EXPECT_TRUE(c->stream);
  EXPECT_TRUE(c->sampling.ignore_eos);
  EXPECT_TRUE(c->thinking);
  EXPECT_EQ(c->reasoning_effort, "max");
  // null means "default" where the reference allows it; -1 turns top_k off.
  c = ParseGenerateConfig(R"({"top_k": -1, "seed": null, "stop": null, "logprobs": null})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->sampling.top_k, 0);
}

// The error message of a config that must be rejected.
std::string Error(const std::string& json) {
  auto c = ParseGenerateConfig(json);
  EXPECT_FALSE(c.ok()) << json;
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos) << "one line";
  return c.status().message();
}

TEST(GenerateConfigTest, RejectsWrongTypesStrictly) {
  EXPECT_EQ(Error(R"({"max_new_tokens": 1.5})"),
            "\"max_new_tokens\" must be an integer, got a number");
  EXPECT_EQ(Error(R"({"max_new_tokens": "16"})"),
            "\"max_new_tokens\" must be an integer, got a string");
  EXPECT_EQ(Error(R"({"temperature": true})"), "\"temperature\" must be a number, got a boolean");
  EXPECT_EQ(Error(R"({"top_k": 2.0})"), "\"top_k\" must be an integer, got a number");
  EXPECT_EQ(Error(R"({"stop": "END"})"), "\"stop\" must be a list of strings, got a string");
  EXPECT_EQ(Error(R"({"stop": ["a", 1]})"), "\"stop\" must be a list of strings, got an integer");
  EXPECT_EQ(Error(R"({"stream": 1})"), "\"stream\" must be true or false, got an integer");
  EXPECT_EQ(Error(R"({"seed": "1"})"), "\"seed\" must be an integer or null, got a string");
  EXPECT_EQ(Error(R"({"stop_token_ids": [1.0]})"),
            "\"stop_token_ids\" must be an integer, got a number");
}

TEST(GenerateConfigTest, RejectsValuesOutOfRange) {
  EXPECT_EQ(Error(R"({"max_new_tokens": 0})"), "\"max_new_tokens\" must be >= 1, got 0");
  EXPECT_NE(Error(R"({"temperature": -0.5})").find("\"temperature\" must be in [0"),
            std::string::npos);
  EXPECT_EQ(Error(R"({"top_p": 0})"), "\"top_p\" must be in (0, 1], got 0");
  EXPECT_EQ(Error(R"({"top_p": 1.5})"), "\"top_p\" must be in (0, 1], got 1.5");
  EXPECT_EQ(Error(R"({"min_p": 2})"), "\"min_p\" must be in [0, 1], got 2");
  EXPECT_EQ(Error(R"({"top_k": -2})"),
            "\"top_k\" must be -1, 0 (off) or a positive integer, got -2");
  EXPECT_EQ(Error(R"({"presence_penalty": 2.5})"),
            "\"presence_penalty\" must be in [-2, 2], got 2.5");
  EXPECT_NE(Error(R"({"repetition_penalty": 0})").find("(0,"), std::string::npos);
  EXPECT_EQ(Error(R"({"logprobs": 21})"), "\"logprobs\" must be in [0, 20], got 21");
  EXPECT_EQ(Error(R"({"seed": -1})"), "\"seed\" must be >= 0, got -1");
  EXPECT_EQ(Error(R"({"stop": [""]})"), "\"stop\" strings must not be empty");
  EXPECT_EQ(Error(R"({"stop_token_ids": [-3]})"),
            "\"stop_token_ids\" must hold token ids >= 0, got -3");
}

TEST(GenerateConfigTest, RejectsUnknownFieldsAndBadJson) {
  EXPECT_EQ(Error(R"({"max_tokens": 5})"), "unknown field \"max_tokens\"");
  EXPECT_EQ(Error(R"([1, 2])"), "must be a JSON object, got a list");
  EXPECT_EQ(Error(R"({"max_new_tokens": )").rfind("invalid JSON: ", 0), 0u);
  EXPECT_EQ(Error("").rfind("invalid JSON", 0), 0u);
}

TEST(SpeculativeConfigTest, AcceptsMtpWithPositiveK) {
  auto k = ParseSpeculativeConfig(R"({"method": "mtp", "num_speculative_tokens": 2})");
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(*k, 2);
}

TEST(SpeculativeConfigTest, AcceptsVllmDeepseekMtpName) {
  auto k = ParseSpeculativeConfig(R"({"method": "deepseek_mtp", "num_speculative_tokens": 3})");
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(*k, 3);
}

TEST(SpeculativeConfigTest, RejectsEverythingElse) {
  auto error = [](const std::string& json) {
    auto k = ParseSpeculativeConfig(json);
    EXPECT_FALSE(k.ok()) << json;
    return k.ok() ? std::string() : k.status().message();
  };
  EXPECT_EQ(error(R"({"method": "dspark", "num_speculative_tokens": 7})"),
            "\"method\" must be \"mtp\" (or vLLM's \"deepseek_mtp\"), got \"dspark\"");
  EXPECT_EQ(error(R"({"num_speculative_tokens": 1})"), "\"method\" is required (\"mtp\")");
  EXPECT_EQ(error(R"({"method": "mtp"})"), "\"num_speculative_tokens\" is required");
  EXPECT_EQ(error(R"({"method": "mtp", "num_speculative_tokens": 0})"),
            "\"num_speculative_tokens\" must be in [1, 64], got 0");
  EXPECT_EQ(error(R"({"method": "mtp", "num_speculative_tokens": "2"})"),
            "\"num_speculative_tokens\" must be an integer, got a string");
  EXPECT_EQ(error(R"({"method": "mtp", "num_speculative_tokens": 1, "model": "x"})"),
            "unknown field \"model\"");
  EXPECT_EQ(error("{").rfind("invalid JSON", 0), 0u);
}

TEST(EngineFlagsTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("123"), 123);
  EXPECT_EQ(*ParseByteSize("64K"), 64 << 10);
  EXPECT_EQ(*ParseByteSize("8G"), int64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1.5GB"), int64_t{3} << 29);
  EXPECT_FALSE(ParseByteSize("abc").ok());
  EXPECT_FALSE(ParseByteSize("8X").ok());
  EXPECT_FALSE(ParseByteSize("1.5").ok());
  EXPECT_FALSE(ParseByteSize("0").ok());
}

TEST(EngineFlagsTest, SpeculationFlags) {
  EngineFlags f;
  ASSERT_TRUE(ResolveEngineFlags(&f).ok());
  EXPECT_EQ(f.options.num_speculative_tokens, 0);
  f.speculative_config = R"({"method":"mtp","num_speculative_tokens":3})";
  ASSERT_TRUE(ResolveEngineFlags(&f).ok());
  EXPECT_EQ(f.options.num_speculative_tokens, 3);
  f.num_speculative_tokens = 1;
  const Status both = ResolveEngineFlags(&f);
  EXPECT_EQ(both.message(),
            "--num-speculative-tokens cannot be combined with --speculative-config");
  f.speculative_config.clear();
  ASSERT_TRUE(ResolveEngineFlags(&f).ok());  // the deprecated alias alone
  EXPECT_EQ(f.options.num_speculative_tokens, 1);
  f.kv_cache_memory = "2G";
  ASSERT_TRUE(ResolveEngineFlags(&f).ok());
  EXPECT_EQ(f.options.kv_cache_memory, int64_t{2} << 30);
}

class OutputTextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = text::Tokenizer::Load(std::string(DSV4_TEST_DATA_DIR) +
                                   "/tokenizer/deepseek_v3_tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.status().message();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }
  static text::Tokenizer* tokenizer_;
};
text::Tokenizer* OutputTextTest::tokenizer_ = nullptr;

TEST_F(OutputTextTest, StopStringAcrossTokensIsRemoved) {
  const std::string full = "The answer is 42. END of story";
  const std::vector<int32_t> ids = tokenizer_->Encode(full);
  OutputText out(*tokenizer_, {"END", ". E"});
  size_t pushed = 0;
  for (int32_t id : ids) {
    ++pushed;
    if (out.Push(id)) break;
  }
  EXPECT_TRUE(out.stopped());
  EXPECT_EQ(out.text(), "The answer is 42");  // the earlier match (". E") wins
  EXPECT_LT(pushed, ids.size());
}

TEST_F(OutputTextTest, WithoutAMatchTheTextIsTheDecode) {
  const std::string full = "héllo wörld 你好";
  OutputText out(*tokenizer_, {"xyz"});
  for (int32_t id : tokenizer_->Encode(full)) EXPECT_FALSE(out.Push(id));
  out.Finish();
  EXPECT_FALSE(out.stopped());
  EXPECT_EQ(out.text(), full);
}

TEST_F(OutputTextTest, StreamingHoldsBackAPossibleStopPrefix) {
  OutputText out(*tokenizer_, {"<stop>"});
  std::string streamed;
  for (int32_t id : tokenizer_->Encode("abc <st")) {
    out.Push(id);
    streamed += out.TakeDelta();
  }
  EXPECT_EQ(streamed, "abc ");  // "<st" may still become "<stop>"
  for (int32_t id : tokenizer_->Encode("ay")) {
    out.Push(id);
    streamed += out.TakeDelta();
  }
  EXPECT_EQ(streamed, "abc <stay");
  bool stopped = false;
  for (int32_t id : tokenizer_->Encode(" x<stop> tail")) {
    if ((stopped = out.Push(id))) break;
  }
  EXPECT_TRUE(stopped);
  streamed += out.TakeDelta();
  EXPECT_EQ(streamed, "abc <stay x");
  EXPECT_EQ(out.text(), "abc <stay x");
}

TEST_F(OutputTextTest, MinTokensLeavesTheFirstTokensUnsearched) {
  const std::vector<int32_t> ids = tokenizer_->Encode("END one END two");
  // Find how many tokens the first "END" takes.
  int64_t first = 0;
  {
    OutputText probe(*tokenizer_, {"END"});
    for (int32_t id : ids) {
      ++first;
      if (probe.Push(id)) break;
    }
  }
  OutputText out(*tokenizer_, {"END"}, /*min_tokens=*/first);
  bool stopped = false;
  for (int32_t id : ids) {
    if ((stopped = out.Push(id))) break;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out.text(), "END one ");  // the second END stops it
  OutputText kept(*tokenizer_, {"END"}, first, /*include_stop=*/true);
  for (int32_t id : ids) {
    if (kept.Push(id)) break;
  }
  EXPECT_EQ(kept.text(), "END one END");
}

TEST(GenerateConfigTest, MinTokensAndIncludeStop) {
  auto c = ParseGenerateConfig(
      R"({"min_tokens":4,"max_new_tokens":8,"include_stop_str_in_output":true})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->sampling.min_tokens, 4);
  EXPECT_TRUE(c->include_stop_str_in_output);
  EXPECT_EQ(ParseGenerateConfig(R"({"min_tokens":9,"max_new_tokens":8})").status().message(),
            "\"min_tokens\" (9) must not exceed \"max_new_tokens\" (8)");
  EXPECT_FALSE(ParseGenerateConfig(R"({"min_tokens":-1})").ok());
}

// One precedence rule: dsv4's defaults < generation_config.json < the JSON
// of --generate-config < the flat flags.
TEST(GenerateConfigTest, FlatFlagsOverrideTheJsonWhichOverridesTheBase) {
  GenerateConfig base;
  base.sampling.temperature = 0.6f;
  base.sampling.top_p = 0.95f;
  base.max_new_tokens = 100;
  auto c = ParseGenerateConfig(R"({"temperature":0.3,"top_k":5})", base);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FLOAT_EQ(c->sampling.temperature, 0.3f);
  EXPECT_FLOAT_EQ(c->sampling.top_p, 0.95f);  // from the base
  EXPECT_EQ(c->max_new_tokens, 100);
  SamplingFlags f;
  f.temperature = 0.0;
  f.max_tokens = 12;
  f.min_tokens = 3;
  f.stop = {"\n\n"};
  f.stop_token_ids = {7};
  f.seed = 5;
  f.include_stop_str_in_output = true;
  ASSERT_TRUE(ApplySamplingFlags(f, &*c).ok());
  EXPECT_FLOAT_EQ(c->sampling.temperature, 0.0f);
  EXPECT_EQ(c->sampling.top_k, 5);  // the JSON's, no flag given
  EXPECT_EQ(c->max_new_tokens, 12);
  EXPECT_EQ(c->sampling.min_tokens, 3);
  EXPECT_EQ(c->stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(c->stop_token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(c->sampling.seed, 5u);
  EXPECT_TRUE(c->include_stop_str_in_output);
  // A bad value names the flag and the field's rule.
  SamplingFlags bad;
  bad.top_p = 2.0;
  EXPECT_EQ(ApplySamplingFlags(bad, &*c).message(), "--top-p: \"top_p\" must be in (0, 1], got 2");
  SamplingFlags over;
  over.min_tokens = 13;
  EXPECT_FALSE(ApplySamplingFlags(over, &*c).ok());
}

TEST(GenerationDefaultsTest, TakesVllmsFieldsAndIgnoresTheRest) {
  auto d = ParseGenerationDefaults(
      R"({"bos_token_id":0,"eos_token_id":1,"do_sample":true,"temperature":0.7,"top_p":0.95,
          "top_k":20,"min_p":0.05,"repetition_penalty":1.1,"max_new_tokens":64,"top_a":null})",
      "m/generation_config.json");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_FLOAT_EQ(d->sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(d->sampling.top_p, 0.95f);
  EXPECT_EQ(d->sampling.top_k, 20);
  EXPECT_FLOAT_EQ(d->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(d->sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(d->max_new_tokens, 64);
  EXPECT_EQ(d->taken.size(), 6u);
  EXPECT_EQ(DescribeGenerationDefaults(*d, "auto"),
            "generation config (auto): defaults from m/generation_config.json: max_new_tokens=64, "
            "min_p=0.05, repetition_penalty=1.1, temperature=0.7, top_k=20, top_p=0.95 (a "
            "request's own values win; --generation-config vllm ignores the file)");
  EXPECT_EQ(ParseGenerationDefaults(R"({"top_p":0})", "g.json").status().message(),
            "g.json: \"top_p\" must be in (0, 1], got 0");
  EXPECT_FALSE(ParseGenerationDefaults(R"({"temperature":"hot"})", "g.json").ok());
  EXPECT_FALSE(ParseGenerationDefaults(R"({"max_new_tokens":1.5})", "g.json").ok());
  EXPECT_FALSE(ParseGenerationDefaults("[1]", "g.json").ok());
}

TEST(GenerationDefaultsTest, AutoVllmAndDirectory) {
  const std::string dir = ::testing::TempDir() + "/gen_defaults_model";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/generation_config.json");
  // auto without a file: dsv4's defaults; a directory without one: an error.
  auto none = LoadGenerationDefaults("auto", dir);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->path.empty());
  EXPECT_EQ(none->sampling.temperature, 0.0f);
  EXPECT_EQ(LoadGenerationDefaults(dir, "/nonexistent").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadGenerationDefaults(dir + "/nope", "").status().code(), StatusCode::kNotFound);
  std::ofstream(dir + "/generation_config.json") << R"({"temperature":0.6})";
  auto taken = LoadGenerationDefaults("auto", dir);
  ASSERT_TRUE(taken.ok());
  EXPECT_FLOAT_EQ(taken->sampling.temperature, 0.6f);
  auto from_dir = LoadGenerationDefaults(dir, "/nonexistent");
  ASSERT_TRUE(from_dir.ok());
  EXPECT_FLOAT_EQ(from_dir->sampling.temperature, 0.6f);
  auto ignored = LoadGenerationDefaults("vllm", dir);
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ(ignored->sampling.temperature, 0.0f);
  EXPECT_NE(DescribeGenerationDefaults(*ignored, "vllm").find("ignored"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::cli
