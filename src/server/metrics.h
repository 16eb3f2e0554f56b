// Server-side request metrics in Prometheus text format with vLLM's metric
// names (docs/server.md "Metrics"), so existing dashboards and `vllm bench` tooling work.
// Gauges and speculative-decoding counters come from EngineStats at scrape
// time; latency histograms and token counters are observed per request here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "engine/async_engine.h"

namespace dsv4::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Appends the _bucket/_sum/_count lines of `name` with `labels` ("k=\"v\"").
  void Render(const std::string& name, const std::string& labels, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // [bounds + 1], non-cumulative; last = +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// One finished request, as measured on the server.
struct RequestTiming {
  double ttft_s = -1;  // < 0: no token was produced
  double e2e_s = 0;
  std::vector<double> itl_s;  // gaps between consecutive token deliveries
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of prompt_tokens, served from the prefix cache
  int64_t generation_tokens = 0;
  std::string finished_reason;  // stop | length | abort | error
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);
  void RecordRequest(const RequestTiming& timing) EXCLUDES(mu_);
  void RecordHttpError(int status) EXCLUDES(mu_);
  std::string Render(const engine::EngineStats& stats) const EXCLUDES(mu_);

 private:
  const std::string labels_;
  mutable Mutex mu_;
  Histogram ttft_ GUARDED_BY(mu_), tpot_ GUARDED_BY(mu_), itl_ GUARDED_BY(mu_),
      e2e_ GUARDED_BY(mu_), prompt_len_ GUARDED_BY(mu_), gen_len_ GUARDED_BY(mu_);
  int64_t prompt_tokens_ GUARDED_BY(mu_) = 0;
  int64_t generation_tokens_ GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> success_ GUARDED_BY(mu_);  // by finished_reason
  std::map<int, int64_t> http_errors_ GUARDED_BY(mu_);      // by status
};

}  // namespace dsv4::server
