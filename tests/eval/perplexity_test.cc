// The perplexity evaluator (src/eval): window plans, the FP64 log-softmax,
// and whole evaluations on a random `tiny` checkpoint checked against a
// reference computed here from Model::Forward / ForwardMtp, one window at a
// time on a fresh single-slot cache.
#include "eval/perplexity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <vector>

#include "text/tokenizer.h"
#include "tools/make_tiny.h"

namespace dsv4::eval {
namespace {

namespace fs = std::filesystem;

int64_t Scored(const std::vector<Window>& windows) {
  int64_t n = 0;
  for (const Window& w : windows) n += w.end - w.first_target;
  return n;
}

TEST(PlanWindows, ChunkedScoresAllButEachWindowsFirst) {
  auto w = PlanWindows(100, 32, 32);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 4u);  // [0,32) [32,64) [64,96) [96,100)
  for (size_t k = 0; k < w->size(); ++k) {
    EXPECT_EQ((*w)[k].begin, static_cast<int64_t>(32 * k));
    EXPECT_EQ((*w)[k].first_target, (*w)[k].begin + 1);
  }
  EXPECT_EQ(w->back().end, 100);
  EXPECT_EQ(Scored(*w), 100 - 4);
  // A last window of one token has nothing to score and is left out.
  auto one = PlanWindows(97, 32, 32);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 3u);
  EXPECT_EQ(Scored(*one), 93);
  // Text shorter than the context: one window.
  auto short_text = PlanWindows(5, 512, 512);
  ASSERT_TRUE(short_text.ok());
  ASSERT_EQ(short_text->size(), 1u);
  EXPECT_EQ(Scored(*short_text), 4);
}

TEST(PlanWindows, SlidingScoresEveryTokenOnceWithMinimumContext) {
  for (const auto& [n, c, s] : std::vector<std::array<int64_t, 3>>{
           {100, 32, 8}, {100, 32, 31}, {33, 32, 1}, {7, 4, 3}, {1000, 64, 48}}) {
    auto w = PlanWindows(n, c, s);
    ASSERT_TRUE(w.ok());
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (size_t k = 0; k < w->size(); ++k) {
      const Window& win = (*w)[k];
      EXPECT_EQ(win.begin, static_cast<int64_t>(k) * s);
      EXPECT_LE(win.end - win.begin, c);
      for (int64_t t = win.first_target; t < win.end; ++t) {
        ++seen[static_cast<size_t>(t)];
        if (k > 0) {
          EXPECT_GE(t - win.begin, c - s) << "n " << n << " target " << t;
        }
      }
    }
    EXPECT_EQ(w->back().end, n);
    EXPECT_EQ(seen[0], 0);
    for (int64_t t = 1; t < n; ++t) EXPECT_EQ(seen[static_cast<size_t>(t)], 1) << t;
    EXPECT_EQ(Scored(*w), n - 1);
  }
}

TEST(PlanWindows, RejectsBadArguments) {
  EXPECT_EQ(PlanWindows(1, 8, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanWindows(0, 8, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanWindows(10, 1, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanWindows(10, 8, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanWindows(10, 8, 9).status().code(), StatusCode::kInvalidArgument);
}

TEST(ScoreRow, KnownValues) {
  // p = (1, 3) / 4.
  const std::vector<float> row = {0.0f, static_cast<float>(std::log(3.0))};
  RowScore r = ScoreRow(row, 0);
  EXPECT_NEAR(r.logprob, std::log(0.25), 1e-7);
  EXPECT_EQ(r.argmax, 1);
  EXPECT_NEAR(ScoreRow(row, 1).logprob, std::log(0.75), 1e-7);
  // Large logits do not overflow; ties pick the lowest id.
  const std::vector<float> big = {1000.0f, 1000.0f, -1000.0f};
  r = ScoreRow(big, 1);
  EXPECT_NEAR(r.logprob, std::log(0.5), 1e-12);
  EXPECT_EQ(r.argmax, 0);
  const std::vector<float> bad = {0.0f, std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(std::isnan(ScoreRow(bad, 0).logprob));
}

constexpr const char* kText =
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, counting the steps "
    "as his father had taught him. There were one hundred and twelve of them, worn smooth in "
    "the middle by a century of boots. At the top he trimmed the wick, polished the great lens "
    "and wrote the weather in a ledger: wind from the north-west, a heavy swell, three fishing "
    "boats returning late. Ships passed far out on the horizon, their lights small and steady. "
    "In winter the storms came in from the sea without warning, and the whole tower hummed "
    "like a struck bell. He did not mind. He liked the long nights, the smell of paraffin and "
    "salt, and the certainty that somewhere out in the dark a sailor was counting the flashes "
    "and knew exactly where the rocks lay.";

class PerplexityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(DSV4_BINARY_DIR) / "tmp" / ("eval_perplexity-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    tools::MakeTinyOptions o;
    o.out_dir = dir_.string();
    o.seed = 3;
    o.tokenizer_json = DSV4_TEST_DATA_DIR "/tokenizer/deepseek_v3_tokenizer.json";
    Status s = tools::MakeTiny(o);
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto model = model::Model::Load(dir_.string());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = model->release();
    auto tok = text::Tokenizer::Load((dir_ / "tokenizer.json").string());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokens_ = new std::vector<int32_t>((*tok)->Encode(kText));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokens_;
    fs::remove_all(dir_);
  }

  static inline fs::path dir_;
  static inline model::Model* model_ = nullptr;
  static inline std::vector<int32_t>* tokens_ = nullptr;
};

// The reference: windows written out here (not PlanWindows), each on a fresh
// one-slot cache, all its rows in one call; log-softmax in long double
// without the max shift (tiny's logits are O(10)).
struct Reference {
  int64_t scored = 0, mtp_scored = 0, top1 = 0, mtp_agree = 0;
  long double nll = 0, mtp_nll = 0;
};

long double LogProb(const float* row, int64_t vocab, int32_t target, int32_t* argmax) {
  long double sum = 0;
  *argmax = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    sum += std::exp(static_cast<long double>(row[v]));
    if (row[v] > row[*argmax]) *argmax = static_cast<int32_t>(v);
  }
  return static_cast<long double>(row[target]) - std::log(sum);
}

Reference ComputeReference(const model::Model& model, const std::vector<int32_t>& tokens,
                           int64_t context, int64_t stride) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = model.config().vocab_size;
  Reference ref;
  model::Workspace ws;
  int64_t prev_end = 0;
  for (int64_t begin = 0;; begin += stride) {
    const int64_t end = std::min(begin + context, n);
    // Chunked: all but the window's first token; sliding: only new targets.
    const int64_t first = stride == context ? begin + 1 : std::max(prev_end, begin + 1);
    prev_end = end;
    const int64_t len = end - begin;
    std::vector<int32_t> ids(tokens.begin() + begin, tokens.begin() + end);
    model::ForwardBatch batch;
    batch.Add(0, 0, ids);
    for (int64_t r = 0; r < len; ++r) batch.logit_rows.push_back(r);
    std::vector<float> logits(static_cast<size_t>(len * vocab));
    std::vector<bf16> streams(static_cast<size_t>(len * model.stream_width()));
    model::ForwardOutputs out;
    out.logits = logits.data();
    out.streams = streams.data();
    auto cache = model.NewCache(1);
    EXPECT_TRUE(model.Forward(batch, *cache, out, ws, nullptr).ok());
    std::vector<int32_t> main_argmax(static_cast<size_t>(n), -1);
    for (int64_t t = first; t < end; ++t) {
      int32_t arg = 0;
      ref.nll -= LogProb(&logits[static_cast<size_t>((t - begin - 1) * vocab)], vocab,
                         tokens[static_cast<size_t>(t)], &arg);
      ref.top1 += arg == tokens[static_cast<size_t>(t)];
      main_argmax[static_cast<size_t>(t)] = arg;
      ++ref.scored;
    }
    if (model.has_mtp() && len >= 2) {
      // Row q: token q + 1 at position q with the main streams of q -> q + 2.
      model::ForwardBatch mtp;
      mtp.Add(0, 0, std::vector<int32_t>(ids.begin() + 1, ids.end()));
      for (int64_t q = 0; q + 1 < len; ++q) mtp.logit_rows.push_back(q);
      std::vector<float> mtp_logits(static_cast<size_t>((len - 1) * vocab));
      model::ForwardOutputs mout;
      mout.logits = mtp_logits.data();
      EXPECT_TRUE(model.ForwardMtp(mtp, streams.data(), *cache, mout, ws, nullptr).ok());
      for (int64_t t = std::max(first, begin + 2); t < end; ++t) {
        int32_t arg = 0;
        ref.mtp_nll -= LogProb(&mtp_logits[static_cast<size_t>((t - begin - 2) * vocab)], vocab,
                               tokens[static_cast<size_t>(t)], &arg);
        ref.mtp_agree += arg == main_argmax[static_cast<size_t>(t)];
        ++ref.mtp_scored;
      }
    }
    if (end == n) break;
  }
  return ref;
}

void ExpectMatches(const PerplexityReport& r, const Reference& ref) {
  EXPECT_EQ(r.main.scored, ref.scored);
  EXPECT_NEAR(r.main.nll_sum, static_cast<double>(ref.nll), 1e-10 * static_cast<double>(ref.nll));
  EXPECT_EQ(r.main.top1, ref.top1);
  const double ref_ppl =
      static_cast<double>(std::exp(ref.nll / static_cast<long double>(ref.scored)));
  EXPECT_NEAR(r.main.perplexity(), ref_ppl, 1e-10 * ref_ppl);
  EXPECT_EQ(r.main.perplexity(), std::exp(r.main.nll_sum / static_cast<double>(r.main.scored)));
  ASSERT_TRUE(r.mtp_note.empty()) << r.mtp_note;
  EXPECT_EQ(r.mtp.scored, ref.mtp_scored);
  EXPECT_NEAR(r.mtp.nll_sum, static_cast<double>(ref.mtp_nll),
              1e-10 * static_cast<double>(ref.mtp_nll));
  EXPECT_EQ(r.mtp_agree, ref.mtp_agree);
  int64_t bucketed = 0;
  for (const ContextBucket& b : r.buckets) bucketed += b.stats.scored;
  EXPECT_EQ(bucketed, r.main.scored);
}

TEST_F(PerplexityTest, ChunkedMatchesReferenceForward) {
  const auto n = static_cast<int64_t>(tokens_->size());
  ASSERT_GT(n, 170);  // two windows of 160: past the window (16), CSA and HCA entries
  ThreadPool pool(2);
  PerplexityOptions o;
  o.context = 160;
  o.batch = 2;
  auto r = EvaluatePerplexity(*model_, *tokens_, o, &pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_windows, 2);
  EXPECT_EQ(r->main.scored, n - 2);
  EXPECT_EQ(r->forward_tokens, n - 2);
  ExpectMatches(*r, ComputeReference(*model_, *tokens_, 160, 160));
}

TEST_F(PerplexityTest, SlidingMatchesReferenceForward) {
  const auto n = static_cast<int64_t>(tokens_->size());
  ThreadPool pool(2);
  PerplexityOptions o;
  o.context = 48;
  o.stride = 20;
  o.batch = 3;
  auto r = EvaluatePerplexity(*model_, *tokens_, o, &pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->main.scored, n - 1);
  EXPECT_GT(r->forward_tokens, n);  // overlapping windows
  ExpectMatches(*r, ComputeReference(*model_, *tokens_, 48, 20));
  // No target of a later window has fewer than context - stride = 28 tokens
  // before it, so the buckets below 16 hold only the first window's targets.
  int64_t short_context = 0;
  for (const ContextBucket& b : r->buckets) {
    if (b.max_context < 16) short_context += b.stats.scored;
  }
  EXPECT_EQ(short_context, 15);
}

TEST_F(PerplexityTest, BitwiseIndependentOfBatchThreadsAndCallSize) {
  PerplexityOptions a;
  a.context = 64;
  a.stride = 40;
  a.batch = 1;
  auto one = EvaluatePerplexity(*model_, *tokens_, a, nullptr);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  PerplexityOptions b = a;
  b.batch = 3;
  // 2 rows per window per call: every window runs in many chunked calls.
  b.max_logit_bytes = 3 * 2 * model_->config().vocab_size * static_cast<int64_t>(sizeof(float));
  int64_t calls = 0;
  b.on_progress = [&calls](const Progress& p) {
    ++calls;
    EXPECT_LE(p.scored, p.total);
  };
  ThreadPool pool(2);
  auto three = EvaluatePerplexity(*model_, *tokens_, b, &pool);
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_GE(calls, 20);
  EXPECT_EQ(one->main.nll_sum, three->main.nll_sum);
  EXPECT_EQ(one->main.top1, three->main.top1);
  EXPECT_EQ(one->mtp.nll_sum, three->mtp.nll_sum);
  EXPECT_EQ(one->mtp_agree, three->mtp_agree);
}

TEST_F(PerplexityTest, RandomModelIsNearTheUniformBound) {
  // Random weights know nothing about the text: the perplexity sits around
  // the vocabulary size (logits with std ~2 put it a few times above).
  PerplexityOptions o;
  o.context = 128;
  ThreadPool pool(2);
  auto r = EvaluatePerplexity(*model_, *tokens_, o, &pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto vocab = static_cast<double>(model_->config().vocab_size);
  EXPECT_GT(r->main.perplexity(), vocab / 10);
  EXPECT_LT(r->main.perplexity(), vocab * 100);
  EXPECT_GT(r->mtp.perplexity(), vocab / 10);
  EXPECT_LT(r->mtp.perplexity(), vocab * 100);
}

TEST_F(PerplexityTest, MtpTurnedOffIsSaidNotScored) {
  PerplexityOptions o;
  o.context = 32;
  o.mtp = false;
  auto r = EvaluatePerplexity(*model_, *tokens_, o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->mtp_note, "MTP scoring was turned off");
  EXPECT_EQ(r->mtp.scored, 0);
  EXPECT_GT(r->main.scored, 0);
}

TEST_F(PerplexityTest, RejectsBadInput) {
  const checkpoint::ModelConfig& cfg = model_->config();
  PerplexityOptions o;
  EXPECT_TRUE(CheckOptions(cfg, o).ok());
  o.context = 1;
  EXPECT_EQ(CheckOptions(cfg, o).message(), "context must be at least 2 tokens, got 1");
  o.context = cfg.max_position_embeddings + 1;
  EXPECT_EQ(CheckOptions(cfg, o).code(), StatusCode::kInvalidArgument);
  o.context = 16;
  o.stride = 17;
  EXPECT_EQ(CheckOptions(cfg, o).code(), StatusCode::kInvalidArgument);
  o.stride = -1;
  EXPECT_EQ(CheckOptions(cfg, o).code(), StatusCode::kInvalidArgument);
  o.stride = 0;
  o.batch = 0;
  EXPECT_EQ(CheckOptions(cfg, o).code(), StatusCode::kInvalidArgument);
  o.batch = 1;
  const std::vector<int32_t> one = {5};
  EXPECT_EQ(EvaluatePerplexity(*model_, one, o, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  const std::vector<int32_t> out_of_vocab = {5, static_cast<int32_t>(cfg.vocab_size)};
  EXPECT_EQ(EvaluatePerplexity(*model_, out_of_vocab, o, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsv4::eval
