#include "server/metrics.h"

#include <fmt/format.h>

namespace dsv4::server {
namespace {

// vLLM's buckets (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTpotBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                         5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                         60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kLenBuckets = {1,   2,    5,    10,   20,    50,    100,   200,
                                         500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};

std::string Num(double v) { return fmt::format("{}", v); }

void Header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string& out) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, Num(bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, Num(sum_));
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_(fmt::format("model_name=\"{}\",engine=\"0\"", model_name)),
      ttft_(kTtftBuckets),
      tpot_(kTpotBuckets),
      itl_(kTpotBuckets),
      e2e_(kE2eBuckets),
      prompt_len_(kLenBuckets),
      gen_len_(kLenBuckets) {}

void ServerMetrics::RecordRequest(const RequestTiming& t) {
  MutexLock lock(&mu_);
  if (t.ttft_s >= 0) ttft_.Observe(t.ttft_s);
  if (t.generation_tokens > 1 && t.ttft_s >= 0) {
    tpot_.Observe((t.e2e_s - t.ttft_s) / static_cast<double>(t.generation_tokens - 1));
  }
  for (double gap : t.itl_s) itl_.Observe(gap);
  e2e_.Observe(t.e2e_s);
  prompt_len_.Observe(static_cast<double>(t.prompt_tokens));
  gen_len_.Observe(static_cast<double>(t.generation_tokens));
  prompt_tokens_ += t.prompt_tokens;
  generation_tokens_ += t.generation_tokens;
  ++success_[t.finished_reason];
}

void ServerMetrics::RecordHttpError(int status) {
  MutexLock lock(&mu_);
  ++http_errors_[status];
}

std::string ServerMetrics::Render(const engine::EngineStats& s) const {
  MutexLock lock(&mu_);
  std::string out;
  const std::string& l = labels_;
  auto gauge = [&](const char* name, const char* help, double v) {
    Header(out, name, "gauge", help);
    out += fmt::format("{}{{{}}} {}\n", name, l, Num(v));
  };
  auto counter = [&](const char* name, const char* help, int64_t v) {
    Header(out, name, "counter", help);
    out += fmt::format("{}{{{}}} {}\n", name, l, v);
  };
  gauge("vllm:num_requests_running", "Requests in model execution batches.",
        static_cast<double>(s.num_running));
  gauge("vllm:num_requests_waiting", "Requests waiting to be processed.",
        static_cast<double>(s.num_waiting));
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.cache_usage);
  counter("vllm:prompt_tokens_total", "Prefill tokens processed.", prompt_tokens_);
  counter("vllm:generation_tokens_total", "Generation tokens processed.", generation_tokens_);
  counter("vllm:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.", s.prefix_cache_queries);
  counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
          s.prefix_cache_hits);
  Header(out, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = success_.find(reason);
    out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", l, reason,
                       it == success_.end() ? 0 : it->second);
  }
  Header(out, "dsv4:http_errors_total", "counter", "Requests answered with an HTTP error.");
  for (const auto& [status, n] : http_errors_) {
    out += fmt::format("dsv4:http_errors_total{{{},status=\"{}\"}} {}\n", l, status, n);
  }
  auto hist = [&](const char* name, const char* help, const Histogram& h) {
    Header(out, name, "histogram", help);
    h.Render(name, l, out);
  };
  hist("vllm:time_to_first_token_seconds", "Time to first token in seconds.", ttft_);
  hist("vllm:time_per_output_token_seconds", "Mean time per output token after the first.", tpot_);
  hist("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", itl_);
  hist("vllm:e2e_request_latency_seconds", "End-to-end request latency in seconds.", e2e_);
  hist("vllm:request_prompt_tokens", "Prompt tokens per request.", prompt_len_);
  hist("vllm:request_generation_tokens", "Generation tokens per request.", gen_len_);
  counter("vllm:spec_decode_num_drafts_total", "Verify steps that carried drafts.",
          s.spec_num_drafts);
  counter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
          s.spec_num_draft_tokens);
  counter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
          s.spec_num_accepted_tokens);
  Header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted draft tokens by draft position.");
  for (size_t i = 0; i < s.spec_accepted_per_pos.size(); ++i) {
    out +=
        fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n",
                    l, i, s.spec_accepted_per_pos[i]);
  }
  return out;
}

}  // namespace dsv4::server
