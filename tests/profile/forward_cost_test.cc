// The profiler's cost, measured in one process: rounds alternate between
// profiling off and on, so machine load hits both alike (docs/profiling.md
// "Costs measured").  ForwardCost: decode forwards, off vs the kernel level;
// EngineCost: whole offline runs through the engine thread, off vs the e2e
// level.  Timing, so disabled by default:
//   DSV4_PROFILE_MODEL=DIR DSV4_PROFILE_THREADS=2 profile_model_test
//     --gtest_also_run_disabled_tests --gtest_filter='*Cost*'
// (default model: the tiny-a test checkpoint).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/offline.h"
#include "launch/engine_setup.h"
#include "model/model.h"
#include "profile/profile.h"
#include "profile/session.h"
#include "testing/golden.h"

namespace dsv4 {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(ProfileForwardCost, DISABLED_Timing) {
  const char* env = std::getenv("DSV4_PROFILE_MODEL");
  const std::string dir = env != nullptr ? env : testing::TestDataPath("golden/tiny-a");
  auto model = model::Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const checkpoint::ModelConfig& cfg = (*model)->config();
  ThreadPool pool(EnvInt("DSV4_PROFILE_THREADS", 2));
  const int rounds = EnvInt("DSV4_PROFILE_ROUNDS", 8);
  const int steps = EnvInt("DSV4_PROFILE_STEPS", 16);
  auto cache = (*model)->NewCache(1);
  model::Workspace ws;
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
  model::ForwardOutputs out;
  out.logits = logits.data();
  model::ForwardBatch prefill;
  std::vector<int32_t> ids;
  for (int i = 0; i < 32; ++i) ids.push_back(3 + i);
  prefill.Add(0, 0, ids);
  prefill.logit_rows.push_back(31);
  ASSERT_TRUE((*model)->Forward(prefill, *cache, out, ws, &pool).ok());
  int64_t pos = 32;
  auto decode = [&](int n) {
    const int64_t t0 = profile::NowNs();
    for (int i = 0; i < n; ++i) {
      model::ForwardBatch b;
      b.Add(0, pos, {static_cast<int32_t>(5 + pos % 100)});
      ++pos;
      b.logit_rows.push_back(0);
      EXPECT_TRUE((*model)->Forward(b, *cache, out, ws, &pool).ok());
    }
    return static_cast<double>(profile::NowNs() - t0) / n / 1e6;  // ms per step
  };
  decode(steps);  // warm-up
  const std::string trace = (std::filesystem::temp_directory_path() /
                             ("dsv4_forward_cost_" + std::to_string(::getpid()) + ".json"))
                                .string();
  std::vector<double> off, kernel;
  int64_t events = 0, dropped = 0;
  for (int r = 0; r < rounds; ++r) {
    off.push_back(decode(steps));
    profile::SessionOptions o;
    o.levels = profile::kKernel;
    o.path = trace;
    o.flush_interval_ms = EnvInt("DSV4_PROFILE_FLUSH_MS", o.flush_interval_ms);
    ASSERT_TRUE(profile::StartSession(o).ok());
    kernel.push_back(decode(steps));
    const Result<profile::SessionSummary> s = profile::StopSession();
    ASSERT_TRUE(s.ok());
    events += s->events;
    dropped += s->dropped_events;
  }
  std::filesystem::remove(trace);
  const double m_off = Median(off), m_kernel = Median(kernel);
  std::printf(
      "%s, %d threads, %d rounds x %d decode steps: off %.3f ms/step, kernel %.3f "
      "ms/step (x%.3f), %.0f events per step, %lld dropped\n",
      dir.c_str(), pool.num_threads(), rounds, steps, m_off, m_kernel, m_kernel / m_off,
      static_cast<double>(events) / (rounds * steps), static_cast<long long>(dropped));
}

// Same alternation through the engine thread, off vs e2e: every step's
// schedule / execute / commit spans, the runner's bind / forward / sample
// spans and the request tracks, on 4 requests decoding 32 tokens each.
TEST(ProfileEngineCost, DISABLED_Timing) {
  const char* env = std::getenv("DSV4_PROFILE_MODEL");
  launch::EngineOptions o;
  o.model_dir = env != nullptr ? env : testing::TestDataPath("golden/tiny-a");
  o.threads = EnvInt("DSV4_PROFILE_THREADS", 2);
  o.max_model_len = 256;
  o.kv_cache_memory = 256 << 20;
  o.num_speculative_tokens = EnvInt("DSV4_PROFILE_K", 0);
  auto engine = launch::CreateLocalEngine(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const int rounds = EnvInt("DSV4_PROFILE_ROUNDS", 8);
  auto run = [&]() {
    std::vector<engine::GenerationRequest> reqs;
    for (int i = 0; i < 4; ++i) {
      engine::GenerationRequest r;
      for (int t = 0; t < 24; ++t) r.prompt.push_back(3 + (7 * i + t) % 90);
      r.max_tokens = 32;
      r.sampling.ignore_eos = true;
      reqs.push_back(std::move(r));
    }
    Result<engine::OfflineReport> rep = engine::RunOffline(**engine, std::move(reqs));
    EXPECT_TRUE(rep.ok());
    return rep.ok() ? rep->wall_seconds * 1e3 / rep->generated_tokens : 0.0;  // ms per token
  };
  run();  // warm-up
  const std::string trace = (std::filesystem::temp_directory_path() /
                             ("dsv4_engine_cost_" + std::to_string(::getpid()) + ".json"))
                                .string();
  std::vector<double> off, e2e;
  int64_t events = 0;
  for (int r = 0; r < rounds; ++r) {
    off.push_back(run());
    profile::SessionOptions so;
    so.levels = profile::kE2e;
    so.path = trace;
    ASSERT_TRUE(profile::StartSession(so).ok());
    e2e.push_back(run());
    const Result<profile::SessionSummary> s = profile::StopSession();
    ASSERT_TRUE(s.ok());
    events += s->events;
  }
  std::filesystem::remove(trace);
  // The median of each pair's ratio: a pair runs back to back, so it sees
  // nearly the same machine load.
  std::vector<double> ratio;
  for (size_t i = 0; i < off.size(); ++i) ratio.push_back(e2e[i] / off[i]);
  std::printf(
      "%s, %d threads, K=%d, %d rounds x 4 requests x 32 tokens: off %.3f ms/token, e2e %.3f "
      "ms/token, median paired ratio x%.3f, %lld events per round\n",
      o.model_dir.c_str(), o.threads, o.num_speculative_tokens, rounds, Median(off), Median(e2e),
      Median(ratio), static_cast<long long>(events / rounds));
}

}  // namespace
}  // namespace dsv4
