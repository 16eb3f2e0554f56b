#include "bench_engine.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

#include "engine/offline.h"
#include "launch/engine_setup.h"
#include "launch/ranks.h"

namespace dsv4::cli {
namespace {

// Median over requests of (last token - first token) / (tokens - 1): the
// decode phase alone, whatever the prefill cost (0 when no request decoded).
// The median, not the mean: requests are submitted one by one to a running
// engine, so the first one or two may start decoding before the others'
// prefill step, and their TPOT then includes that whole step.
double MedianTpotSeconds(const engine::OfflineReport& report) {
  std::vector<double> tpot;
  for (const engine::OfflineOutput& o : report.outputs) {
    if (o.tokens.size() < 2) continue;
    tpot.push_back((o.total_seconds - o.first_token_seconds) /
                   static_cast<double>(o.tokens.size() - 1));
  }
  if (tpot.empty()) return 0;
  std::sort(tpot.begin(), tpot.end());
  const size_t n = tpot.size();
  return n % 2 == 1 ? tpot[n / 2] : 0.5 * (tpot[n / 2 - 1] + tpot[n / 2]);
}

// Runs one greedy request per prompt, decode_steps new tokens each
// (ignore_eos, so every run generates the same count), then shuts the
// engine down; a failure is printed as a dsv4 bench error.
Result<engine::OfflineReport> RunDecodeRequests(engine::AsyncEngine& eng,
                                                std::vector<std::vector<int32_t>> prompts,
                                                int64_t decode_steps) {
  std::vector<engine::GenerationRequest> reqs;
  for (auto& p : prompts) {
    engine::GenerationRequest r;
    r.prompt = std::move(p);
    r.max_tokens = decode_steps;
    r.sampling.ignore_eos = true;
    reqs.push_back(std::move(r));
  }
  auto report = engine::RunOffline(eng, std::move(reqs));
  eng.Shutdown();
  if (!report.ok()) std::cerr << "dsv4 bench: " << report.status().message() << "\n";
  return report;
}

// Rank 0's share of an expert-parallel engine run (every step, prefill
// included): time per step split into compute and communication, and the
// routed-output bytes exchanged per token per MoE layer.  The other ranks log
// the same figures when the engine ends ("rank r of N: ... steps in ...").
void PrintRankTraffic(const launch::RankTraffic& t, int32_t ranks) {
  if (t.steps == 0) return;
  const double ms = 1e3 / static_cast<double>(t.steps);
  const double comm = t.moe.exchange_seconds + t.plan_seconds;
  const double token_layers = std::max<double>(static_cast<double>(t.moe.token_layers), 1.0);
  std::printf(
      "    rank 0 of %d: %lld steps, %.2f ms per step = compute %.2f + communication %.2f (%.1f%%: "
      "MoE all-gathers %.2f, plan broadcast %.2f); %.0f bytes exchanged per token per MoE layer "
      "(all ranks; rank 0 sent %.0f, received %.0f; %lld token-layers)\n",
      ranks, static_cast<long long>(t.steps), t.step_seconds * ms, t.compute_seconds() * ms,
      comm * ms, t.step_seconds > 0 ? 100.0 * comm / t.step_seconds : 0.0,
      t.moe.exchange_seconds * ms, t.plan_seconds * ms, t.bytes_per_token_layer(),
      static_cast<double>(t.moe.bytes_sent) / token_layers,
      static_cast<double>(t.moe.bytes_received) / token_layers,
      static_cast<long long>(t.moe.token_layers));
}

}  // namespace

// Decode throughput through the full engine (scheduler, runner, sampler),
// without MTP and with MTP K = 1..args.speculative, side by side in one run:
// the same `batch` requests of prompt_len random ids, greedy, decode_steps
// new tokens each (ignore_eos so every run generates the same count).
int RunSpeculativeComparison(const BenchArgs& args, int64_t vocab) {
  std::printf(
      "engine, batch %lld, prompt %lld, %lld new tokens each (run tok/s = new tokens / "
      "wall time of the whole run, prefill included; decode tok/s = batch / median TPOT, "
      "TPOT = (last token - first token) / (tokens - 1) per request):\n",
      static_cast<long long>(args.batch), static_cast<long long>(args.prompt_len),
      static_cast<long long>(args.decode_steps));
  double base_tps = 0;
  // k = -1 is an untimed warm-up (first-run effects: page cache, allocator,
  // thread start-up) so that K=0 is not penalised for running first.
  for (int32_t k = -1; k <= args.speculative; ++k) {
    launch::EngineOptions eo;
    eo.model_dir = args.model;
    eo.prepacked = args.prepacked;
    eo.threads = args.threads;
    eo.cpu_list = args.cpu_list;
    eo.max_num_seqs = args.batch;
    eo.max_model_len = args.prompt_len + args.decode_steps + 8;
    eo.num_speculative_tokens = std::max(k, 0);
    eo.ep = args.ep;
    eo.numa = args.residency.numa;  // each rank places itself (--ep > 1)
    eo.hugepages = args.residency.hugepages;
    eo.enable_prefix_caching = args.enable_prefix_caching;
    auto engine = launch::CreateLocalEngine(eo);
    if (!engine.ok()) {
      std::cerr << "dsv4 bench: " << engine.status().message() << "\n";
      return 1;
    }
    std::mt19937 rng(99);
    std::vector<std::vector<int32_t>> prompts(size_t(args.batch));
    for (auto& p : prompts) {
      p.resize(static_cast<size_t>(args.prompt_len));
      for (auto& id : p) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    }
    auto report = RunDecodeRequests(**engine, std::move(prompts), args.decode_steps);
    if (!report.ok()) return 1;
    const double run_tps = report->generated_tokens_per_second();
    const double tpot = MedianTpotSeconds(*report);
    const double tps = tpot > 0 ? static_cast<double>(args.batch) / tpot : 0;
    if (k < 0) continue;
    if (k == 0) base_tps = tps;
    std::printf(
        "  K=%d: decode %.2f tok/s (x%.2f vs no MTP, TPOT %.1f ms), run %.2f tok/s, mean "
        "accepted length %.2f, accepted %lld of %lld drafts\n",
        k, tps, base_tps > 0 ? tps / base_tps : 0.0, tpot * 1e3, run_tps,
        report->mean_accepted_length, static_cast<long long>(report->spec_accepted_tokens),
        static_cast<long long>(report->spec_draft_tokens));
    if (args.ep > 1) PrintRankTraffic(launch::LastEngineTraffic(), args.ep);
  }
  return 0;
}

// One engine per setting of prefix caching (off, on); on each, a chat of
// args.prefix_turns turns run one after another: turn 1 is --prompt-len
// random ids, turn t + 1 is turn t's prompt + its answer (--decode-steps
// greedy tokens) + a 32-token message.  Prints each turn's time to first
// token side by side; then --batch distinct prompts decoded with each
// setting (nothing hits: what prefix caching costs a plain decode).
int RunPrefixComparison(const BenchArgs& args, int64_t vocab) {
  const int64_t message = 32;
  const int64_t turns = args.prefix_turns;
  std::mt19937 rng(7);
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return ids;
  };
  std::vector<std::vector<int32_t>> messages;  // the same for both settings
  for (int64_t t = 0; t < turns; ++t)
    messages.push_back(random_ids(t == 0 ? args.prompt_len : message));
  const std::vector<int32_t> warmup = random_ids(64);
  std::vector<std::vector<int32_t>> decode_prompts;
  for (int64_t b = 0; b < args.batch; ++b) decode_prompts.push_back(random_ids(args.prompt_len));
  struct Turn {
    int64_t prompt = 0, cached = 0;
    double ttft = 0;
    std::vector<int32_t> answer;
  };
  std::vector<Turn> runs[2];
  // Median TPOT of the no-hit decode, per setting, over alternating repeats
  // (off, on, off, on, ...): load drifts on a shared host.
  std::vector<double> tpots[2];
  auto make_engine = [&](bool prefix) {
    launch::EngineOptions eo;
    eo.model_dir = args.model;
    eo.prepacked = args.prepacked;
    eo.threads = args.threads;
    eo.cpu_list = args.cpu_list;
    eo.max_num_seqs = std::max<int64_t>(args.batch, 1);
    eo.max_model_len = args.prompt_len + turns * (args.decode_steps + message) + 8;
    eo.hugepages = args.residency.hugepages;
    eo.enable_prefix_caching = prefix;
    return launch::CreateLocalEngine(eo);
  };
  for (int on = 0; on < 2; ++on) {
    auto engine = make_engine(on == 1);
    if (!engine.ok()) {
      std::cerr << "dsv4 bench: " << engine.status().message() << "\n";
      return 1;
    }
    {  // untimed warm-up (first-run effects), a prompt nothing shares
      engine::GenerationRequest w;
      w.prompt = warmup;
      w.max_tokens = 2;
      if (auto r = engine::RunOffline(**engine, {w}); !r.ok()) {
        std::cerr << "dsv4 bench: " << r.status().message() << "\n";
        return 1;
      }
    }
    std::vector<int32_t> prompt;
    for (int64_t t = 0; t < turns; ++t) {
      prompt.insert(prompt.end(), messages[size_t(t)].begin(), messages[size_t(t)].end());
      engine::GenerationRequest r;
      r.prompt = prompt;
      r.max_tokens = args.decode_steps;
      r.sampling.ignore_eos = true;
      auto report = engine::RunOffline(**engine, {r});
      if (!report.ok()) {
        std::cerr << "dsv4 bench: " << report.status().message() << "\n";
        return 1;
      }
      const engine::OfflineOutput& o = report->outputs[0];
      runs[on].push_back({static_cast<int64_t>(prompt.size()), o.num_cached_tokens,
                          o.first_token_seconds, o.tokens});
      prompt.insert(prompt.end(), o.tokens.begin(), o.tokens.end());
    }
    (*engine)->Shutdown();
  }
  std::printf(
      "multi-turn chat, %lld turns (turn 1: %lld tokens; each turn + %lld answer + %lld message "
      "tokens), time to first token without / with prefix caching:\n",
      static_cast<long long>(turns), static_cast<long long>(args.prompt_len),
      static_cast<long long>(args.decode_steps), static_cast<long long>(message));
  bool same = true;
  for (int64_t t = 0; t < turns; ++t) {
    const Turn& off = runs[0][size_t(t)];
    const Turn& on = runs[1][size_t(t)];
    same = same && off.answer == on.answer;
    std::printf(
        "  turn %lld: prompt %lld tokens, TTFT off %.3f s, on %.3f s (%lld cached), x%.2f\n",
        static_cast<long long>(t + 1), static_cast<long long>(off.prompt), off.ttft, on.ttft,
        static_cast<long long>(on.cached), on.ttft > 0 ? off.ttft / on.ttft : 0.0);
  }
  std::printf("  answers identical with and without prefix caching: %s\n", same ? "yes" : "NO");
  std::fflush(stdout);  // the table stands even if the decode runs are cut short
  for (int rep = 0; rep < 6; ++rep) {
    const int on = rep % 2;
    auto engine = make_engine(on == 1);
    if (!engine.ok()) {
      std::cerr << "dsv4 bench: " << engine.status().message() << "\n";
      return 1;
    }
    auto report = RunDecodeRequests(**engine, decode_prompts, args.decode_steps);
    if (!report.ok()) return 1;
    tpots[on].push_back(MedianTpotSeconds(*report));
  }
  double tpot[2];
  for (int on = 0; on < 2; ++on) {
    std::sort(tpots[on].begin(), tpots[on].end());
    tpot[on] = tpots[on][tpots[on].size() / 2];
  }
  std::printf(
      "no hits, batch %lld x %lld-token prompts, %lld new tokens, 3 alternating runs each: median "
      "TPOT off %.2f ms, on %.2f ms (x%.3f)\n",
      static_cast<long long>(args.batch), static_cast<long long>(args.prompt_len),
      static_cast<long long>(args.decode_steps), tpot[0] * 1e3, tpot[1] * 1e3,
      tpot[0] > 0 ? tpot[1] / tpot[0] : 0.0);
  return same ? 0 : 1;
}

}  // namespace dsv4::cli
