// bench: prefill and decode throughput on a checkpoint, the machine's memory
// bandwidth (STREAM triad), weight bytes read per decode token, and the
// achieved fraction of the bandwidth roofline.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "default_model.h"
#include "engine/memory_budget.h"
#include "engine/offline.h"
#include "engine_flags.h"
#include "kernels/dispatch.h"
#include "launch/compute_pool.h"
#include "launch/engine_setup.h"
#include "launch/ranks.h"
#include "membw.h"
#include "model/model.h"
#include "profile/profile.h"
#include "profile/summary.h"
#include "residency.h"

namespace dsv4::cli {

namespace {

struct BenchArgs {
  std::string model;
  int64_t prompt_len = 128;
  int64_t decode_steps = 32;
  int64_t batch = 1;
  int threads = 0;
  std::string cpu_list = "auto";
  int64_t triad_mib = 512;
  int32_t speculative = 0;            // > 0: engine runs without MTP and with K = 1..speculative
  int32_t ep = 1;                     // > 1: expert-parallel engine runs only (docs/scale-out.md)
  bool enable_prefix_caching = true;  // of the engine runs (--speculative)
  int64_t prefix_turns = 0;           // > 0: multi-turn TTFT with and without prefix caching
  std::string prepacked = "auto";
  ProfileFlagArgs profile;
  ResidencyFlags residency;
};

// Writes a session an early return (a failed forward) left running, so no
// temporary file is left behind.
struct StopProfileOnExit {
  ~StopProfileOnExit() {
    if (profile::SessionActive()) (void)StopProfile("dsv4 bench");
  }
};

// Kernel level: the per-op tables of the bare loop's prefill and decode
// forwards (docs/profiling.md "Per-op table"), read back from its trace.
void PrintOpTables(const profile::SessionSummary& trace, int64_t batch) {
  if ((trace.levels & profile::kKernel) == 0) return;
  auto tables = profile::SummarizeForwards(trace.path, batch);
  if (!tables.ok()) {
    std::cerr << "dsv4 bench: " << tables.status().message() << "\n";
    return;
  }
  for (const profile::ForwardSummary& t : *tables) {
    std::printf("%s", profile::FormatOpTable(t).c_str());
  }
  std::printf(
      "flame chart of one prefill and one decode forward: /usr/bin/python3 "
      "bench/profile_chart.py %s %s.png\n",
      trace.path.c_str(), trace.path.c_str());
}

// Weight bytes one decode token reads with batch 1: every dense tensor once,
// num_experts_per_tok of the n_routed_experts routed experts per MoE layer
// (all experts have the same size), one embedding row; the MTP block is not
// run by plain decoding.
// The mapped tensors the forward pass reads: with a prepacked sidecar its
// tensors plus the checkpoint's embed and head, else the checkpoint's.
std::vector<std::pair<std::string, const TensorView*>> ForwardTensors(
    const checkpoint::Checkpoint& ckpt) {
  std::vector<std::pair<std::string, const TensorView*>> out;
  const checkpoint::SafetensorsFile* sidecar = ckpt.overlay();
  std::vector<std::string> names = sidecar != nullptr ? sidecar->Names() : ckpt.Names();
  if (sidecar != nullptr) names.insert(names.end(), {"embed.weight", "head.weight"});
  for (const std::string& name : names) {
    if (name.rfind("__pad.", 0) == 0) continue;
    if (const TensorView* v = ckpt.Find(name)) out.emplace_back(name, v);
  }
  return out;
}

double WeightBytesPerDecodeToken(const model::Model& model) {
  const checkpoint::ModelConfig& cfg = model.config();
  double bytes = 0;
  for (const auto& [name, v] : ForwardTensors(model.checkpoint())) {
    const double n = static_cast<double>(v->nbytes());
    if (name.rfind("mtp.", 0) == 0) continue;
    if (name == "embed.weight") {
      bytes += n / static_cast<double>(cfg.vocab_size);
    } else if (name.find(".ffn.experts.") != std::string::npos) {
      bytes += n * static_cast<double>(cfg.num_experts_per_tok) /
               static_cast<double>(cfg.n_routed_experts);
    } else {
      bytes += n;
    }
  }
  return bytes;
}

// Reads one byte per 4 KiB page of every tensor so that page faults of the
// memory-mapped checkpoint are not timed as prefill or decode.
double TouchWeights(const checkpoint::Checkpoint& ckpt, double* bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  volatile uint8_t sink = 0;
  *bytes = 0;
  for (const auto& [name, v] : ForwardTensors(ckpt)) {
    const auto* p = static_cast<const uint8_t*>(v->data);
    const size_t n = v->nbytes();
    for (size_t off = 0; off < n; off += 4096) sink = sink + p[off];
    *bytes += static_cast<double>(n);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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

int RunBench(BenchArgs& args) {
  const Result<profile::ProfileFlags> profile_flags = ResolveProfileFlags(args.profile);
  if (!profile_flags.ok()) {
    std::cerr << "dsv4 bench: " << profile_flags.status().message() << "\n";
    return 2;
  }
  auto location = ResolveModel(args.model);
  if (!location.ok()) {
    std::cerr << "dsv4 bench: " << location.status().message() << "\n";
    return 2;
  }
  args.model = location->dir;
  LogModel(*location);
  launch::EngineOptions placement;  // --numa and the CPUs, as the engines get them
  placement.threads = args.threads;
  placement.cpu_list = args.cpu_list;
  placement.ep = args.ep;
  if (Status placed = PlaceMemory(args.residency, &placement); !placed.ok()) {
    std::cerr << "dsv4 bench: " << placed.message() << "\n";
    return ExitCodeFor(placed);
  }
  args.cpu_list = placement.cpu_list;
  // Expert parallelism: only the engine runs span the ranks (each rank loads
  // its own shard); the bare loop and the triad below measure one process,
  // so rank 0 reads only the configuration here.
  if (args.ep > 1) {
    Result<checkpoint::ModelConfig> cfg = checkpoint::LoadModelConfig(args.model);
    if (!cfg.ok()) {
      std::cerr << "dsv4 bench: " << cfg.status().message() << "\n";
      return 1;
    }
    if (args.prompt_len + args.decode_steps > cfg->max_position_embeddings) {
      std::cerr << "dsv4 bench: --prompt-len + --decode-steps exceed the model's positions\n";
      return 2;
    }
    return RunSpeculativeComparison(args, cfg->vocab_size);
  }
  model::ModelOptions model_options;
  model_options.prepacked = args.prepacked;
  auto model_or = model::Model::Load(args.model, model_options);
  if (!model_or.ok()) {
    std::cerr << "dsv4 bench: " << model_or.status().message() << "\n";
    return 1;
  }
  if (Status resident = MakeResident(args.residency); !resident.ok()) {
    std::cerr << "dsv4 bench: " << resident.message() << "\n";
    return ExitCodeFor(resident);
  }
  const model::Model& model = **model_or;
  const checkpoint::ModelConfig& cfg = model.config();
  // Sizes the flags' ranges cannot know: positions past the model's (the
  // rope tables and caches are not defined there) and triad arrays that do
  // not fit in memory (an allocation failure would abort).
  if (args.prompt_len + args.decode_steps > cfg.max_position_embeddings) {
    std::cerr << "dsv4 bench: --prompt-len + --decode-steps = "
              << args.prompt_len + args.decode_steps << " exceeds the model's "
              << cfg.max_position_embeddings << " positions\n";
    return 2;
  }
  if (args.prefix_turns > 0) return RunPrefixComparison(args, cfg.vocab_size);
  if (auto mem = engine::ReadMemInfo();
      mem.ok() && 3 * (args.triad_mib << 20) > mem->available_bytes) {
    std::cerr << "dsv4 bench: --triad-mib " << args.triad_mib << " needs 3 x " << args.triad_mib
              << " MiB, more than the " << (mem->available_bytes >> 20)
              << " MiB of available memory\n";
    return 2;
  }
  auto pool_or = launch::CreateComputePool(args.threads, args.cpu_list);
  if (!pool_or.ok()) {
    std::cerr << "dsv4 bench: " << pool_or.status().message() << "\n";
    return 1;
  }
  ThreadPool& pool = **pool_or;
  std::printf("model %s: %lld layers, hidden %lld, vocab %lld; isa %s (%s); %d threads\n",
              args.model.c_str(), static_cast<long long>(cfg.num_hidden_layers),
              static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size),
              std::string(kernels::IsaName(kernels::ActiveIsa())).c_str(),
              CpuFeatures::Detect().ToString().c_str(), pool.num_threads());

  // The arrays stay allocated: one pass runs between groups of decode steps
  // below, so the decode's roofline ratio compares with bandwidth measured
  // under the same load (the up-front passes drift from it on a shared host).
  Triad triad_arrays(static_cast<size_t>(args.triad_mib) << 20, &pool);
  std::vector<double> upfront;
  for (int r = 0; r <= 5; ++r) upfront.push_back(triad_arrays.Pass());
  upfront.erase(upfront.begin());  // warm-up
  const TriadResult triad =
      SummarizeTriad(std::move(upfront), triad_arrays.array_bytes(), pool.num_threads());
  std::printf("memory bandwidth (STREAM triad, 3 x %lld MiB): best %.2f GB/s, median %.2f GB/s\n",
              static_cast<long long>(args.triad_mib), triad.best_gbps, triad.median_gbps);

  double weight_bytes = 0;
  const double touch_sec = TouchWeights(model.checkpoint(), &weight_bytes);
  std::printf("weights paged in: %.1f MiB in %.2f s (not timed below)\n", weight_bytes / (1 << 20),
              touch_sec);

  auto cache = model.NewCache(args.batch);
  model::Workspace ws;
  Status s;
  std::mt19937 rng(1234);
  model::ForwardBatch prefill;
  for (int64_t b = 0; b < args.batch; ++b) {
    std::vector<int32_t> ids(static_cast<size_t>(args.prompt_len));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab_size));
    prefill.Add(b, 0, ids);
    prefill.logit_rows.push_back(prefill.num_tokens() - 1);
  }
  std::vector<float> logits(static_cast<size_t>(args.batch * cfg.vocab_size));
  model::ForwardOutputs out;
  out.logits = logits.data();
  profile::SetThreadName("main");
  // The profile covers the timed prefill and decode loop (trace.json), and
  // with --speculative the engine runs in a second session (trace-2.json).
  s = StartProfile(*profile_flags);
  if (!s.ok()) {
    std::cerr << "dsv4 bench: " << s.message() << "\n";
    return 1;
  }
  const StopProfileOnExit stop_on_exit;
  auto t0 = std::chrono::steady_clock::now();
  s = model.Forward(prefill, *cache, out, ws, &pool);
  const double prefill_sec = Seconds(t0);
  if (!s.ok()) {
    std::cerr << "dsv4 bench: " << s.message() << "\n";
    return 1;
  }
  std::printf("prefill: %lld x %lld tokens in %.3f s = %.1f tok/s\n",
              static_cast<long long>(args.batch), static_cast<long long>(args.prompt_len),
              prefill_sec, static_cast<double>(prefill.num_tokens()) / prefill_sec);

  std::vector<int32_t> next(static_cast<size_t>(args.batch));
  auto argmax_rows = [&] {
    for (int64_t b = 0; b < args.batch; ++b) {
      const float* row = logits.data() + b * cfg.vocab_size;
      next[static_cast<size_t>(b)] =
          static_cast<int32_t>(std::max_element(row, row + cfg.vocab_size) - row);
    }
  };
  argmax_rows();
  // One triad pass before every kStepsPerTriad decode steps and one after the
  // last: timed apart from the steps (decode_sec counts forwards only).
  constexpr int64_t kStepsPerTriad = 4;
  std::vector<double> interleaved;
  double decode_sec = 0;
  for (int64_t step = 0; step < args.decode_steps; ++step) {
    if (step % kStepsPerTriad == 0) interleaved.push_back(triad_arrays.Pass());
    t0 = std::chrono::steady_clock::now();
    model::ForwardBatch batch;
    for (int64_t b = 0; b < args.batch; ++b) {
      batch.Add(b, args.prompt_len + step, {next[static_cast<size_t>(b)]});
      batch.logit_rows.push_back(b);
    }
    s = model.Forward(batch, *cache, out, ws, &pool);
    if (!s.ok()) {
      std::cerr << "dsv4 bench: " << s.message() << "\n";
      return 1;
    }
    argmax_rows();
    decode_sec += Seconds(t0);
  }
  interleaved.push_back(triad_arrays.Pass());
  const TriadResult alongside =
      SummarizeTriad(interleaved, triad_arrays.array_bytes(), pool.num_threads());
  Result<profile::SessionSummary> trace = profile::SessionSummary{};
  if (profile_flags->enabled && !(trace = StopProfile("dsv4 bench")).ok()) return 1;
  const double steps_per_sec = static_cast<double>(args.decode_steps) / decode_sec;
  std::printf("decode: %lld steps x batch %lld in %.3f s = %.2f tok/s (%.2f ms/step)\n",
              static_cast<long long>(args.decode_steps), static_cast<long long>(args.batch),
              decode_sec, steps_per_sec * static_cast<double>(args.batch), 1e3 / steps_per_sec);
  const double bytes = WeightBytesPerDecodeToken(model);
  std::printf("weight bytes per decode token (batch 1): %.1f MiB\n", bytes / (1 << 20));
  if (args.batch == 1) {
    const double achieved = bytes * steps_per_sec / 1e9;
    std::printf("achieved weight stream %.2f GB/s = %.1f%% of triad best\n", achieved,
                100.0 * achieved / triad.best_gbps);
  }
  std::vector<double> sorted = interleaved;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "triad interleaved with decode (a pass before every %lld steps and after the last): %zu "
      "passes, median %.2f GB/s (min %.2f, max %.2f)\n",
      static_cast<long long>(kStepsPerTriad), sorted.size(), alongside.median_gbps, sorted.front(),
      sorted.back());
  if (args.batch == 1) {
    const double achieved = bytes * steps_per_sec / 1e9;
    std::printf("decode weight stream %.2f GB/s = %.1f%% of the interleaved triad median\n",
                achieved, 100.0 * achieved / alongside.median_gbps);
  }
  if (profile_flags->enabled) PrintOpTables(*trace, args.batch);
  if (args.speculative > 0) {
    if (!(s = StartProfile(*profile_flags)).ok()) {
      std::cerr << "dsv4 bench: " << s.message() << "\n";
      return 1;
    }
    const int rc = RunSpeculativeComparison(args, cfg.vocab_size);
    if (profile_flags->enabled && !StopProfile("dsv4 bench").ok()) return 1;
    return rc;
  }
  return 0;
}

}  // namespace

void RegisterBench(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill/decode throughput vs memory bandwidth");
  cmd->add_option("--model", args->model, kModelFlagHelp);
  AddResidencyFlags(cmd, &args->residency);
  cmd->add_option("--prompt-len", args->prompt_len, "Prompt tokens per sequence")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--decode-steps", args->decode_steps, "Decode steps to time")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--batch", args->batch, "Sequences decoded together")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads,
                  "Compute threads (0 = one per physical core of one NUMA node)")
      ->check(ThreadsRange());
  cmd->add_option("--cpu-list", args->cpu_list,
                  "CPUs to pin the compute threads to, one per thread: auto (the default cores "
                  "when --threads is 0), none, or a list like 0-7,16")
      ->capture_default_str();
  cmd->add_option("--prepacked", args->prepacked,
                  "Prepacked sidecar: auto, off or a path (docs/prepack.md)")
      ->capture_default_str();
  cmd->add_option("--triad-mib", args->triad_mib, "MiB per triad array")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 16))
      ->capture_default_str();
  cmd->add_option("--speculative", args->speculative,
                  "Also compare engine decode without MTP and with MTP K = 1..N")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--ep", args->ep,
                  "Expert-parallel ranks (mpirun -np N ... --ep N): runs only the engine "
                  "comparison, without MTP and with K = 1..--speculative, each with rank 0's "
                  "time per step (compute, communication) and bytes exchanged per token per "
                  "MoE layer")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", args->enable_prefix_caching,
                "Prefix caching in the engine runs of --speculative (on by default)");
  cmd->add_option("--prefix-turns", args->prefix_turns,
                  "Only compare time to first token of an N-turn chat (turn 1: --prompt-len "
                  "tokens, answers of --decode-steps) without and with prefix caching, and "
                  "decode of --batch prompts that never hit")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  AddProfileFlags(cmd, &args->profile);
  cmd->callback([args, exit_code] { *exit_code = RunBench(*args); });
}

}  // namespace dsv4::cli
