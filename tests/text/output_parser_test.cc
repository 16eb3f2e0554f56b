#include "text/output_parser.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/text/text_test_util.h"
#include "text/utf8.h"

namespace dsv4::text {
namespace {

using testing::ReadText;
using testing::V4Tokenizer;
using Json = OrderedJson;

constexpr const char* kEos = "<｜end▁of▁sentence｜>";

// Deltas of one parse, concatenated per field.
struct Streamed {
  ParsedOutput result;
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

Streamed Run(const std::vector<int32_t>& ids, const OutputParserOptions& opt,
             const std::vector<size_t>& chunks) {
  auto parser = OutputParser::Create(V4Tokenizer(), opt);
  EXPECT_TRUE(parser.ok());
  Streamed s;
  auto absorb = [&](const ParserDelta& d) {
    s.reasoning += d.reasoning_content;
    s.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (t.index == static_cast<int>(s.calls.size())) s.calls.emplace_back(t.name, "");
      ASSERT_LT(t.index, static_cast<int>(s.calls.size()));
      if (!t.name.empty()) {
        EXPECT_EQ(s.calls[t.index].first, t.name);
      }
      s.calls[t.index].second += t.arguments;
    }
  };
  size_t pos = 0;
  for (size_t c : chunks) {
    const size_t n = std::min(c, ids.size() - pos);
    absorb(parser->Feed(std::span<const int32_t>(ids).subspan(pos, n)));
    pos += n;
  }
  if (pos < ids.size()) absorb(parser->Feed(std::span<const int32_t>(ids).subspan(pos)));
  absorb(parser->Finish());
  s.result = parser->result();
  return s;
}

std::vector<size_t> Uniform(size_t chunk, size_t total) {
  return std::vector<size_t>(total / chunk + 1, chunk);
}

// Parses with many chunkings; checks they agree with each other and with
// their own deltas; returns the whole-output result.
ParsedOutput ParseAllWays(const std::vector<int32_t>& ids, const OutputParserOptions& opt) {
  const Streamed whole = Run(ids, opt, {ids.size()});
  std::vector<std::vector<size_t>> chunkings;
  for (size_t c : {1, 2, 7, 29, 100000}) chunkings.push_back(Uniform(c, ids.size()));
  std::mt19937 rng(static_cast<uint32_t>(ids.size()));
  for (int i = 0; i < 20; ++i) {
    std::vector<size_t> p;
    for (size_t total = 0; total < ids.size();) {
      p.push_back(rng() % 9);  // zero-length feeds included
      total += p.back();
    }
    chunkings.push_back(p);
  }
  for (const auto& ch : chunkings) {
    const Streamed s = Run(ids, opt, ch);
    EXPECT_EQ(s.result.reasoning_content, whole.result.reasoning_content);
    EXPECT_EQ(s.result.content, whole.result.content);
    EXPECT_EQ(s.result.error.ToString(), whole.result.error.ToString());
    EXPECT_EQ(s.result.saw_eos, whole.result.saw_eos);
    EXPECT_EQ(s.result.tool_calls.size(), whole.result.tool_calls.size());
    for (size_t i = 0; i < std::min(s.result.tool_calls.size(), whole.result.tool_calls.size());
         ++i) {
      EXPECT_EQ(s.result.tool_calls[i].name, whole.result.tool_calls[i].name);
      EXPECT_EQ(s.result.tool_calls[i].arguments, whole.result.tool_calls[i].arguments);
      EXPECT_EQ(s.result.tool_calls[i].complete, whole.result.tool_calls[i].complete);
    }
    // The deltas add up to the final result.
    EXPECT_EQ(s.reasoning, s.result.reasoning_content);
    EXPECT_EQ(s.content, s.result.content);
    EXPECT_EQ(s.calls.size(), s.result.tool_calls.size());
    for (size_t i = 0; i < std::min(s.calls.size(), s.result.tool_calls.size()); ++i) {
      EXPECT_EQ(s.calls[i].first, s.result.tool_calls[i].name);
      EXPECT_EQ(s.calls[i].second, s.result.tool_calls[i].arguments);
    }
  }
  return whole.result;
}

ParsedOutput ParseText(const std::string& text, const OutputParserOptions& opt) {
  return ParseAllWays(V4Tokenizer().Encode(text), opt);
}

OutputParserOptions Thinking() {
  OutputParserOptions o;
  o.thinking_mode = ThinkingMode::kThinking;
  return o;
}

std::string Param(const std::string& k, const std::string& v, bool str) {
  return "<｜DSML｜parameter name=\"" + k + "\" string=\"" + (str ? "true" : "false") + "\">" + v +
         "</｜DSML｜parameter>";
}
std::string Invoke(const std::string& name, const std::vector<std::string>& params) {
  std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
  for (const auto& p : params) s += p + "\n";
  return s + "</｜DSML｜invoke>";
}
std::string Block(const std::vector<std::string>& invokes) {
  std::string s = "\n\n<｜DSML｜tool_calls>\n";
  for (const auto& i : invokes) s += i + "\n";
  return s + "</｜DSML｜tool_calls>";
}

TEST(CompletionTextParserTest, DerivedParseCases) {
  const Json d = Json::parse(ReadText("text/encoding/derived_from_reference/derived_cases.json"));
  int n = 0;
  for (const Json& c : d["parse_cases"]) {
    auto mode = ParseThinkingMode(c["thinking_mode"].get<std::string>());
    auto r = ParseCompletionText(c["completion"].get<std::string>(), *mode);
    ++n;
    if (c.contains("expected_error")) {
      EXPECT_FALSE(r.ok()) << c["name"];
      continue;
    }
    ASSERT_TRUE(r.ok()) << c["name"] << r.status().ToString();
    const Json& e = c["expected"];
    EXPECT_EQ(r->content, e["content"].get<std::string>()) << c["name"];
    EXPECT_EQ(r->reasoning_content, e["reasoning_content"].get<std::string>()) << c["name"];
    ASSERT_EQ(r->tool_calls.size(), e["tool_calls"].size()) << c["name"];
    for (size_t i = 0; i < r->tool_calls.size(); ++i) {
      EXPECT_EQ(r->tool_calls[i].name, e["tool_calls"][i]["function"]["name"].get<std::string>());
      EXPECT_EQ(r->tool_calls[i].arguments,
                e["tool_calls"][i]["function"]["arguments"].get<std::string>());
    }
  }
  EXPECT_EQ(n, 11);
}

TEST(OutputParserTest, AgreesWithTheReferenceOnEveryWellFormedDerivedCase) {
  const Json d = Json::parse(ReadText("text/encoding/derived_from_reference/derived_cases.json"));
  int n = 0;
  for (const Json& c : d["parse_cases"]) {
    if (c.contains("expected_error")) continue;
    OutputParserOptions opt;
    opt.thinking_mode = *ParseThinkingMode(c["thinking_mode"].get<std::string>());
    const std::string text = c["completion"];
    const ParsedOutput got = ParseText(text, opt);
    const ParsedOutput ref = *ParseCompletionText(text, opt.thinking_mode);
    EXPECT_TRUE(got.error.ok()) << c["name"] << got.error.ToString();
    EXPECT_TRUE(got.saw_eos);
    EXPECT_EQ(got.content, ref.content) << c["name"];
    EXPECT_EQ(got.reasoning_content, ref.reasoning_content) << c["name"];
    ASSERT_EQ(got.tool_calls.size(), ref.tool_calls.size()) << c["name"];
    for (size_t i = 0; i < got.tool_calls.size(); ++i) {
      EXPECT_EQ(got.tool_calls[i].name, ref.tool_calls[i].name);
      EXPECT_EQ(got.tool_calls[i].arguments, ref.tool_calls[i].arguments);  // byte-identical
      EXPECT_TRUE(got.tool_calls[i].complete);
    }
    ++n;
  }
  EXPECT_EQ(n, 6);
}

TEST(OutputParserTest, LenientWhereTheReferenceRejects) {
  // No "\n\n" before the block in chat mode: still a tool call, nothing leaks.
  const std::string block = Block({Invoke("f", {Param("a", "1", false)})});
  ParsedOutput r = ParseText(block.substr(2) + kEos, {});
  EXPECT_TRUE(r.error.ok());
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"a\": 1}");
  // Missing EOS (stopped by length): content as generated.
  r = ParseText("Hello there!", {});
  EXPECT_EQ(r.content, "Hello there!");
  EXPECT_FALSE(r.saw_eos);
  // Thinking output without </think>: all reasoning.
  r = ParseText(std::string("reasoning only") + kEos, Thinking());
  EXPECT_EQ(r.reasoning_content, "reasoning only");
  EXPECT_EQ(r.content, "");
  // A tool block inside reasoning ends it.
  r = ParseText("thinking\n\n" + block.substr(2) + kEos, Thinking());
  EXPECT_EQ(r.reasoning_content, "thinking");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  // Text after the block is content; a stray <think> / </think> in content is dropped.
  r = ParseText("r</think>a<think>b</think>c" + block + "tail" + kEos, Thinking());
  EXPECT_EQ(r.content, "abctail");
  EXPECT_EQ(r.tool_calls.size(), 1u);
  // </｜DSML｜tool_calls> may close the open invoke.
  r = ParseText("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"g\">\n</｜DSML｜tool_calls>" +
                    std::string(kEos),
                {});
  EXPECT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");
  EXPECT_TRUE(r.tool_calls[0].complete);
}

TEST(OutputParserTest, OfficialFixtureParseChecks) {
  const std::string p1 = ReadText("text/encoding/official_v4_flash/test_output_1.txt");
  const std::string open = "<｜Assistant｜><think>";
  const size_t a = p1.find(open) + open.size();
  const std::string first = p1.substr(a, p1.find("<｜User｜>", a) - a);
  ParsedOutput r = ParseText(first, Thinking());
  EXPECT_EQ(r.reasoning_content,
            "The user wants to know the weather in Beijing. I should use the get_weather tool.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(r.tool_calls[0].arguments),
            Json::parse(R"({"location":"Beijing","unit":"celsius"})"));
  r = ParseText(p1.substr(p1.rfind(open) + open.size()), Thinking());
  EXPECT_EQ(r.reasoning_content, "Got the weather data. Let me format a nice response.");
  EXPECT_NE(r.content.find("22°C"), std::string::npos);
  EXPECT_TRUE(r.tool_calls.empty());
  const std::string p2 = ReadText("text/encoding/official_v4_flash/test_output_2.txt");
  r = ParseText(p2.substr(p2.rfind(open) + open.size()), Thinking());
  EXPECT_EQ(r.reasoning_content, "The user asks about the capital of France. It is Paris.");
  EXPECT_EQ(r.content, "The capital of France is Paris.");
}

TEST(OutputParserTest, ComplexValuesRoundTrip) {
  const std::string text_value =
      std::string("杭州 \"quoted\" \\ slash\n tab\t nul") + '\0' + " <xml> </think>";
  const std::string completion =
      "r</think>" +
      Block({Invoke("search", {Param("text", text_value, true), Param("n", "2", false),
                               Param("flag", "true", false), Param("nothing", "null", false),
                               Param("items", "[1, \"x\"]", false),
                               Param("options", "{\"v\": false}", false)}),
             Invoke("ping", {}), Invoke("other", {Param("text", "second", true)})}) +
      kEos;
  const ParsedOutput r = ParseText(completion, Thinking());
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(r.tool_calls.size(), 3u);
  Json expected = {{"text", text_value},
                   {"n", 2},
                   {"flag", true},
                   {"nothing", nullptr},
                   {"items", Json::array({1, "x"})},
                   {"options", {{"v", false}}}};
  EXPECT_EQ(Json::parse(r.tool_calls[0].arguments), expected);
  EXPECT_EQ(r.tool_calls[1].name, "ping");
  EXPECT_EQ(r.tool_calls[1].arguments, "{}");
  EXPECT_EQ(r.tool_calls[2].name, "other");
  EXPECT_EQ(r.tool_calls[2].arguments, "{\"text\": \"second\"}");
  for (const auto& c : r.tool_calls) EXPECT_TRUE(c.complete);
  EXPECT_EQ(r.content, "");
}

TEST(OutputParserTest, LookAlikeTextIsContent) {
  // The spellings of the markers made of ordinary tokens (no special ids).
  const Tokenizer& tok = V4Tokenizer();
  std::vector<int32_t> ids;
  const std::string look = "a <｜DSML｜tool_calls> </think> <think> <｜end▁of▁sentence｜> b";
  for (size_t i = 0; i < look.size();) {
    const size_t n = std::max<size_t>(1, Utf8SequenceLength(std::string_view(look).substr(i)));
    for (int32_t id : tok.Encode(look.substr(i, n))) ids.push_back(id);
    i += n;
  }
  for (int32_t id : ids) ASSERT_FALSE(tok.IsAdded(id));
  ids.push_back(1);
  const ParsedOutput r = ParseAllWays(ids, {});
  EXPECT_TRUE(r.error.ok());
  EXPECT_EQ(r.content, look);
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(OutputParserTest, NonStringValuesMustBeStrictJson) {
  for (const char* bad : {"NaN", "Infinity", "-Infinity", "1e9999", "broken", "[1,", "{'a': 1}"}) {
    const ParsedOutput r =
        ParseText("\n\n<｜DSML｜tool_calls>\n" + Invoke("f", {Param("x", bad, false)}) +
                      "\n</｜DSML｜tool_calls>" + kEos,
                  {});
    EXPECT_FALSE(r.error.ok()) << bad;
    EXPECT_EQ(r.content, "") << bad;
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_FALSE(r.tool_calls[0].complete);
  }
}

TEST(OutputParserTest, TruncatedCallIsIncomplete) {
  const std::string text =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"text\" string=\"true\">unfinished";
  const ParsedOutput r = ParseText(text, {});  // no EOS: stopped by length
  EXPECT_TRUE(r.error.ok());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"text\": \"unfinished");
  EXPECT_FALSE(r.tool_calls[0].complete);
  EXPECT_FALSE(r.saw_eos);
  // EOS inside a call is malformed: reported, still incomplete.
  const ParsedOutput e = ParseText(text + kEos, {});
  EXPECT_FALSE(e.error.ok());
  EXPECT_FALSE(e.tool_calls[0].complete);
}

TEST(OutputParserTest, MalformedMarkupIsAnErrorNeverContent) {
  OutputParserOptions known;
  known.tool_names = {"f"};
  const std::string ok_param = Param("a", "x", true);
  const std::vector<std::pair<std::string, OutputParserOptions>> cases = {
      {"before" + Block({Invoke("g", {ok_param})}) + kEos, known},         // unknown tool
      {"before" + Block({Invoke("f", {ok_param, ok_param})}) + kEos, {}},  // duplicate parameter
      {"before\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"f\">\n" + std::string(kEos),
       {}},  // bad header
      {"before\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\" x=\"y\">\n" + std::string(kEos),
       {}},
      {"before\n\n<｜DSML｜toolcalls>\n" + std::string(kEos), {}},        // malformed opener
      {"before\n\n<｜DSML｜tool_calls>\nstray" + std::string(kEos), {}},  // stray text
      {"before｜DSML｜ after" + std::string(kEos), {}},                   // DSML outside a tag
      {"before</｜DSML｜invoke>" + std::string(kEos), {}},                // stray closer
      {"before" +
           Block({Invoke(
               "f", {"<｜DSML｜parameter name=\"a\" string=\"maybe\">x</｜DSML｜parameter>"})}) +
           kEos,
       {}},
      {"before" +
           Block(
               {Invoke("f", {"<｜DSML｜parameter name=\"a\" string=\"true\">x<｜DSML｜invoke"})}) +
           kEos,
       {}},
  };
  for (const auto& [text, opt] : cases) {
    const ParsedOutput r = ParseText(text, opt);
    EXPECT_FALSE(r.error.ok()) << text;
    EXPECT_EQ(r.content, "before") << text;
    EXPECT_EQ(r.content.find("DSML"), std::string::npos);
  }
}

TEST(OutputParserTest, ToolChoiceNoneConsumesBlocksSilently) {
  OutputParserOptions none;
  none.parse_tool_calls = false;
  const ParsedOutput r =
      ParseText("before" + Block({Invoke("f", {Param("a", "x", true)})}) + "after" + kEos, none);
  EXPECT_TRUE(r.error.ok());
  EXPECT_EQ(r.content, "beforeafter");
  EXPECT_TRUE(r.tool_calls.empty());
}

TEST(OutputParserTest, BrokenUtf8NeverReachesOutput) {
  const Tokenizer& tok = V4Tokenizer();
  // Content "a" + the first two bytes of 中 + "b", then a string value with a lone 0xff.
  std::vector<int32_t> ids = tok.Encode("a");
  for (char c : std::string("\xe4\xb8")) ids.push_back(tok.Encode(std::string(1, c))[0]);
  for (int32_t id : tok.Encode("b\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke "
                               "name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">"))
    ids.push_back(id);
  ids.push_back(tok.Encode("\xff")[0]);
  for (int32_t id : tok.Encode(
           "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>"))
    ids.push_back(id);
  const ParsedOutput r = ParseAllWays(ids, {});
  EXPECT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.content,
            "a\xEF\xBF\xBD"
            "b");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{\"a\": \"\xEF\xBF\xBD\"}");
}

TEST(OutputParserTest, RandomIdsNeverCrashAndChunkingNeverMatters) {
  const Tokenizer& tok = V4Tokenizer();
  const std::vector<int32_t> pool = {1,      128821, 128822, 128825, 0,    2,   128803,
                                     129000, -5,     271,    30,     1718, 1018};
  const std::vector<int32_t> vocab =
      tok.Encode("tool_calls invoke parameter name=\"x\" string=\"true\" > < / \n 1 [ ] {");
  std::mt19937 rng(3);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<int32_t> ids;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const uint32_t k = rng() % 3;
      ids.push_back(k == 0   ? pool[rng() % pool.size()]
                    : k == 1 ? vocab[rng() % vocab.size()]
                             : static_cast<int32_t>(rng() % 128000));
    }
    OutputParserOptions opt;
    opt.thinking_mode = iter % 2 ? ThinkingMode::kThinking : ThinkingMode::kChat;
    const ParsedOutput r = ParseAllWays(ids, opt);
    EXPECT_TRUE(IsValidUtf8(r.content));
    EXPECT_TRUE(IsValidUtf8(r.reasoning_content));
    for (const auto& c : r.tool_calls) {
      EXPECT_TRUE(IsValidUtf8(c.arguments));
      if (c.complete) {
        EXPECT_FALSE(Json::parse(c.arguments, nullptr, false).is_discarded()) << c.arguments;
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::text
