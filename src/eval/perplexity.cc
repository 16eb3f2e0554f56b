#include "eval/perplexity.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>

namespace dsv4::eval {

Result<std::vector<Window>> PlanWindows(int64_t num_tokens, int64_t context, int64_t stride) {
  if (num_tokens < 2) {
    return InvalidArgument("the text has {} token(s); perplexity needs at least 2", num_tokens);
  }
  if (context < 2) return InvalidArgument("context must be at least 2 tokens, got {}", context);
  if (stride < 1 || stride > context) {
    return InvalidArgument("stride must be in [1, context = {}], got {}", context, stride);
  }
  std::vector<Window> windows;
  int64_t scored_end = 0;  // targets below it belong to an earlier window
  for (int64_t begin = 0;; begin += stride) {
    const int64_t end = std::min(begin + context, num_tokens);
    const int64_t first = std::max(scored_end, begin + 1);
    if (first < end) windows.push_back({begin, end, first});
    scored_end = std::max(scored_end, end);
    if (end == num_tokens) break;
  }
  return windows;
}

RowScore ScoreRow(std::span<const float> logits, int32_t target) {
  RowScore r;
  float best = logits[0];
  bool finite = true;
  for (size_t v = 0; v < logits.size(); ++v) {
    finite = finite && std::isfinite(logits[v]);
    if (logits[v] > best) {
      best = logits[v];
      r.argmax = static_cast<int32_t>(v);
    }
  }
  if (!finite) {
    r.logprob = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  // Shifted by the maximum, so exp never overflows and the largest term is 1.
  const double m = best;
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - m);
  r.logprob = (static_cast<double>(logits[static_cast<size_t>(target)]) - m) - std::log(sum);
  return r;
}

double HeadStats::perplexity() const { return scored > 0 ? std::exp(mean_nll()) : 0; }

Status CheckOptions(const checkpoint::ModelConfig& cfg, const PerplexityOptions& options) {
  const int64_t context = options.context;
  if (context < 2) return InvalidArgument("context must be at least 2 tokens, got {}", context);
  if (context > cfg.max_position_embeddings) {
    return InvalidArgument("context {} exceeds the model's max_position_embeddings {}", context,
                           cfg.max_position_embeddings);
  }
  const int64_t stride = options.stride == 0 ? context : options.stride;
  if (stride < 1 || stride > context) {
    return InvalidArgument("stride must be in [1, context = {}], got {}", context, stride);
  }
  if (options.batch < 1) return InvalidArgument("batch must be at least 1, got {}", options.batch);
  return Status::Ok();
}

namespace {

// Per-target results over the whole stream, indexed by the target's position,
// so that the sums run in target order whatever the batching.
struct TargetScores {
  explicit TargetScores(int64_t n)
      : logprob(static_cast<size_t>(n), 0), argmax(static_cast<size_t>(n), -1) {}
  std::vector<double> logprob;
  std::vector<int32_t> argmax;  // -1: not scored
};

// Scores logits row i against target targets[i], in parallel over rows; an
// error names the first target whose row had a non-finite logit.
Status ScoreRows(const float* logits, int64_t vocab, const std::vector<int64_t>& targets,
                 std::span<const int32_t> tokens, TargetScores& out, const char* head,
                 ThreadPool* pool) {
  const auto n = static_cast<int64_t>(targets.size());
  const int64_t grain = std::max<int64_t>(1, 32768 / vocab);
  ParallelFor(pool, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto t = static_cast<size_t>(targets[static_cast<size_t>(i)]);
      const RowScore r = ScoreRow({logits + i * vocab, static_cast<size_t>(vocab)}, tokens[t]);
      out.logprob[t] = r.logprob;
      out.argmax[t] = r.argmax;
    }
  });
  for (const int64_t t : targets) {
    if (std::isnan(out.logprob[static_cast<size_t>(t)])) {
      return FailedPrecondition("non-finite {} logits predicting the token at position {}", head,
                                t);
    }
  }
  return Status::Ok();
}

HeadStats Sum(const TargetScores& s, std::span<const int32_t> tokens) {
  HeadStats h;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (s.argmax[t] < 0) continue;
    ++h.scored;
    h.nll_sum -= s.logprob[t];
    h.top1 += s.argmax[t] == tokens[t] ? 1 : 0;
  }
  return h;
}

std::string NoMtpReason(const model::Model& model, const PerplexityOptions& options) {
  if (!options.mtp) return "MTP scoring was turned off";
  if (model.config().num_nextn_predict_layers == 0) {
    return "the model has no MTP layer (num_nextn_predict_layers is 0)";
  }
  if (!model.has_mtp()) return "the MTP layer was not loaded";
  return "";
}

}  // namespace

Result<PerplexityReport> EvaluatePerplexity(const model::Model& model,
                                            std::span<const int32_t> tokens,
                                            const PerplexityOptions& options, ThreadPool* pool) {
  const auto start = std::chrono::steady_clock::now();
  const checkpoint::ModelConfig& cfg = model.config();
  DSV4_RETURN_IF_ERROR(CheckOptions(cfg, options));
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = cfg.vocab_size;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t id = tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= vocab) {
      return InvalidArgument(
          "token id {} at position {} is outside the model's vocabulary ({} ids)", id, t, vocab);
    }
  }
  const int64_t stride = options.stride == 0 ? options.context : options.stride;
  DSV4_ASSIGN_OR_RETURN(std::vector<Window> windows, PlanWindows(n, options.context, stride));

  PerplexityReport rep;
  rep.num_tokens = n;
  rep.context = options.context;
  rep.stride = stride;
  rep.num_windows = static_cast<int64_t>(windows.size());
  rep.mtp_note = NoMtpReason(model, options);
  const bool use_mtp = rep.mtp_note.empty();

  // A window runs its first end - begin - 1 positions: the last token is only
  // ever a target.  That is also every position the MTP rows need (row q reads
  // token q + 1 <= the last one).
  int64_t longest = 0, total = 0;
  for (const Window& w : windows) {
    longest = std::max(longest, w.end - w.begin - 1);
    rep.forward_tokens += w.end - w.begin - 1;
    total += w.end - w.first_target;
  }
  const int64_t batch = std::min<int64_t>(options.batch, rep.num_windows);
  const int64_t rows_per_window = std::clamp<int64_t>(
      options.max_logit_bytes / (batch * vocab * static_cast<int64_t>(sizeof(float))), 1, longest);
  model::CacheOptions cache_options;
  cache_options.include_mtp = use_mtp;
  std::unique_ptr<model::ModelCache> cache = model.NewCache(batch, cache_options);
  model::Workspace ws;
  std::vector<float> logits(static_cast<size_t>(batch * rows_per_window * vocab));
  std::vector<bf16> streams(
      use_mtp ? static_cast<size_t>(batch * rows_per_window * model.stream_width()) : 0);
  TargetScores main_scores(n), mtp_scores(use_mtp ? n : 0);
  std::vector<int64_t> context_of(static_cast<size_t>(n), 0);

  Progress progress;
  progress.total = total;
  for (size_t g = 0; g < windows.size(); g += static_cast<size_t>(batch)) {
    const size_t count = std::min(static_cast<size_t>(batch), windows.size() - g);
    int64_t group_len = 0;
    for (size_t b = 0; b < count; ++b) {
      cache->Reset(static_cast<int64_t>(b));
      group_len = std::max(group_len, windows[g + b].end - windows[g + b].begin - 1);
    }
    // Positions [c0, c1) of every window of the group per call.
    for (int64_t c0 = 0; c0 < group_len; c0 += rows_per_window) {
      model::ForwardBatch main_batch, mtp_batch;
      std::vector<int64_t> main_targets, mtp_targets;
      for (size_t b = 0; b < count; ++b) {
        const Window& w = windows[g + b];
        const int64_t len = w.end - w.begin - 1;
        if (c0 >= len) continue;
        const int64_t c1 = std::min(c0 + rows_per_window, len);
        const int64_t row0 = main_batch.num_tokens();
        const auto* first = tokens.data() + w.begin;
        main_batch.Add(static_cast<int64_t>(b), c0, std::vector<int32_t>(first + c0, first + c1));
        if (use_mtp) {
          mtp_batch.Add(static_cast<int64_t>(b), c0,
                        std::vector<int32_t>(first + c0 + 1, first + c1 + 1));
        }
        for (int64_t p = c0; p < c1; ++p) {
          // Position p: the main head predicts token p + 1, the MTP head p + 2.
          const int64_t t = w.begin + p + 1;
          if (t >= w.first_target) {
            main_batch.logit_rows.push_back(row0 + p - c0);
            main_targets.push_back(t);
            context_of[static_cast<size_t>(t)] = p + 1;
          }
          if (use_mtp && t + 1 < w.end && t + 1 >= w.first_target) {
            mtp_batch.logit_rows.push_back(row0 + p - c0);
            mtp_targets.push_back(t + 1);
          }
        }
      }
      model::ForwardOutputs out;
      out.logits = logits.data();
      out.streams = use_mtp ? streams.data() : nullptr;
      DSV4_RETURN_IF_ERROR(model.Forward(main_batch, *cache, out, ws, pool));
      DSV4_RETURN_IF_ERROR(
          ScoreRows(logits.data(), vocab, main_targets, tokens, main_scores, "main", pool));
      if (use_mtp) {
        // Every chunk runs, scored or not: the MTP window must see all positions.
        model::ForwardOutputs mtp_out;
        mtp_out.logits = logits.data();
        DSV4_RETURN_IF_ERROR(
            model.ForwardMtp(mtp_batch, streams.data(), *cache, mtp_out, ws, pool));
        DSV4_RETURN_IF_ERROR(
            ScoreRows(logits.data(), vocab, mtp_targets, tokens, mtp_scores, "MTP", pool));
      }
      progress.scored += static_cast<int64_t>(main_targets.size());
      progress.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options.on_progress) options.on_progress(progress);
    }
  }

  rep.main = Sum(main_scores, tokens);
  for (int64_t t = 0; t < n; ++t) {
    if (main_scores.argmax[static_cast<size_t>(t)] < 0) continue;
    const auto ctx = static_cast<uint64_t>(context_of[static_cast<size_t>(t)]);
    const auto k = static_cast<size_t>(std::bit_width(ctx) - 1);  // ctx in [2^k, 2^(k+1))
    while (rep.buckets.size() <= k) {
      const int64_t lo = int64_t{1} << rep.buckets.size();
      rep.buckets.push_back({lo, std::min(2 * lo - 1, options.context - 1), {}});
    }
    HeadStats& s = rep.buckets[k].stats;
    ++s.scored;
    s.nll_sum -= main_scores.logprob[static_cast<size_t>(t)];
    s.top1 += main_scores.argmax[static_cast<size_t>(t)] == tokens[static_cast<size_t>(t)];
  }
  if (use_mtp) {
    rep.mtp = Sum(mtp_scores, tokens);
    for (size_t t = 0; t < tokens.size(); ++t) {
      rep.mtp_agree += mtp_scores.argmax[t] >= 0 && mtp_scores.argmax[t] == main_scores.argmax[t];
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return rep;
}

}  // namespace dsv4::eval
