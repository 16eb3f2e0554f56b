// Perplexity of a model over a token stream (`dsv4 eval`, docs/eval.md).
//
// The stream is cut into windows; each window runs as a fresh sequence from
// position 0 (its own cache slot, Reset before use), several windows per
// forward call as separate slots.  A target token t of window [begin, end) is
// predicted by the main model's logits at position t - 1 - begin, and by the
// MTP head (when the model has one) at position t - 2 - begin, given the true
// token t - 1: the MTP's draft for q + 2.  Log-probabilities are an FP64
// log-softmax over the FP32 logits.
//
// Results are bitwise independent of the batch size, the thread count and the
// rows per forward call: the forward is batch invariant (docs/model.md), every
// target is scored on its own, and the sums run in target order at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/model_config.h"
#include "model/model.h"

namespace dsv4::eval {

// One window: tokens [begin, end) run from position 0; targets
// [first_target, end) are scored (first_target > begin).
struct Window {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t first_target = 0;
};

// Window k starts at k * stride and holds min(context, num_tokens - k * stride)
// tokens; it scores the targets no earlier window scored, from
// max(previous end, begin + 1).  The last window is the first that reaches the
// end of the stream; a window with nothing to score is left out.
//  - stride == context (chunked): disjoint windows; every token except each
//    window's first is scored, with 1 .. context - 1 tokens of context.
//  - stride < context (sliding): every token except the stream's first is
//    scored exactly once; a target of window k >= 1 sees at least
//    context - stride tokens of context.
// InvalidArgument for num_tokens < 2, context < 2, stride < 1 or stride > context.
Result<std::vector<Window>> PlanWindows(int64_t num_tokens, int64_t context, int64_t stride);

// The FP64 log-softmax of one FP32 logit row at `target`, and the row's argmax
// (the lowest id among equal maxima).  logprob is NaN if a logit is not finite.
struct RowScore {
  double logprob = 0;
  int32_t argmax = 0;
};
RowScore ScoreRow(std::span<const float> logits, int32_t target);

struct Progress {
  int64_t scored = 0;  // main-model targets scored so far
  int64_t total = 0;   // main-model targets in all windows
  double seconds = 0;  // since the evaluation started
};

struct PerplexityOptions {
  int64_t context = 512;
  int64_t stride = 0;  // 0 = context (chunked)
  int64_t batch = 4;   // windows per forward call, one cache slot each
  bool mtp = true;     // also score the MTP head when the model has one
  // Bound on the FP32 logits of one forward call: a window longer than
  // max_logit_bytes / (batch * vocab * 4) rows runs in several calls on its
  // slot (chunked prefill, bitwise equal to one call).
  int64_t max_logit_bytes = int64_t{256} << 20;
  std::function<void(const Progress&)> on_progress;  // after every forward call
};

struct HeadStats {
  int64_t scored = 0;
  double nll_sum = 0;  // nats, summed in target order
  int64_t top1 = 0;    // targets equal to the argmax
  double mean_nll() const { return scored > 0 ? nll_sum / static_cast<double>(scored) : 0; }
  double perplexity() const;
  double top1_rate() const {
    return scored > 0 ? static_cast<double>(top1) / static_cast<double>(scored) : 0;
  }
};

// Main-model targets whose window holds min_context .. max_context tokens
// before them (powers of two: 1, 2-3, 4-7, ...).
struct ContextBucket {
  int64_t min_context = 0;
  int64_t max_context = 0;
  HeadStats stats;
};

struct PerplexityReport {
  int64_t num_tokens = 0;
  int64_t context = 0;
  int64_t stride = 0;
  int64_t num_windows = 0;
  int64_t forward_tokens = 0;  // positions run through the main model (overlap included)
  HeadStats main;
  std::vector<ContextBucket> buckets;
  // MTP head: scored when mtp_note is empty.  Its targets are the main ones
  // with at least two tokens before them in their window.
  std::string mtp_note;
  HeadStats mtp;
  // MTP argmax == main argmax on the same target: the fraction of greedy
  // K = 1 drafts verification would accept, on the text's prefixes.
  int64_t mtp_agree = 0;
  double seconds = 0;
};

// The options against the model, before any weight is touched: context in
// [2, max_position_embeddings], stride in [1, context] (0 = context), batch >= 1.
Status CheckOptions(const checkpoint::ModelConfig& cfg, const PerplexityOptions& options);

// Scores every window of `tokens` (ids < vocab_size, at least 2).
Result<PerplexityReport> EvaluatePerplexity(const model::Model& model,
                                            std::span<const int32_t> tokens,
                                            const PerplexityOptions& options, ThreadPool* pool);

}  // namespace dsv4::eval
