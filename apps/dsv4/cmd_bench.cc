// bench: prefill and decode throughput on a checkpoint, the machine's memory
// bandwidth (STREAM triad) and peak compute per instruction mix, weight bytes
// read per decode token (estimated and measured from the routing), prefill
// FLOPs per token, and the achieved fractions of both rooflines.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <random>

#include "base/cpu_features.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "bench_args.h"
#include "bench_costs.h"
#include "bench_engine.h"
#include "bench_print.h"
#include "commands.h"
#include "default_model.h"
#include "engine/memory_budget.h"
#include "engine_flags.h"
#include "kernels/dispatch.h"
#include "launch/compute_pool.h"
#include "launch/engine_setup.h"
#include "launch/huge_pages.h"
#include "launch/residency.h"
#include "membw.h"
#include "model/model.h"
#include "peak_compute.h"
#include "profile/profile.h"
#include "profile/summary.h"
#include "residency.h"

namespace dsv4::cli {

namespace {

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

// Reads one byte per 4 KiB page of every tensor so that page faults of the
// memory-mapped checkpoint are not timed as prefill or decode.
double TouchWeights(const checkpoint::Checkpoint& ckpt, double* bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  volatile uint8_t sink = 0;
  *bytes = 0;
  // Tensors the model copied into its own layouts (their copies are already
  // resident) are not read again: paging them in would only grow the RSS.
  // Sorted, so each lookup is a binary search (Flash drops ~10^5 tensors).
  std::vector<std::pair<uintptr_t, uintptr_t>> dropped = ckpt.DroppedRanges();
  std::sort(dropped.begin(), dropped.end());
  const auto is_dropped = [&](const void* data) {
    const auto at = reinterpret_cast<uintptr_t>(data);
    auto it = std::upper_bound(dropped.begin(), dropped.end(),
                               std::pair<uintptr_t, uintptr_t>{at, UINTPTR_MAX});
    return it != dropped.begin() && at < std::prev(it)->second;
  };
  for (const auto& [name, v] : ForwardTensors(ckpt)) {
    if (is_dropped(v->data)) continue;
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

// batch sequences of prompt_len random ids (slots 0..batch-1 from position
// 0), the last row of each asking for logits.
model::ForwardBatch RandomPrompts(int64_t batch, int64_t prompt_len, int64_t vocab,
                                  std::mt19937& rng) {
  model::ForwardBatch prefill;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int32_t> ids(static_cast<size_t>(prompt_len));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    prefill.Add(b, 0, ids);
    prefill.logit_rows.push_back(prefill.num_tokens() - 1);
  }
  return prefill;
}

// An untimed prefill of `prefill` in a fresh cache, as llama-bench runs
// before timing: the workspace, the kernels' per-thread scratch and the
// allocator grow to this shape and fault their pages in here, so the timed
// prefill that follows measures steady-state throughput (the first-request
// cost is a startup figure).  --no-warmup skips it.
Status WarmUpPrefill(const model::Model& model, int64_t batch, const model::ForwardBatch& prefill,
                     model::ForwardOutputs out, model::Workspace& ws, ThreadPool& pool) {
  auto cache = model.NewCache(batch);
  const auto t0 = std::chrono::steady_clock::now();
  DSV4_RETURN_IF_ERROR(model.Forward(prefill, *cache, out, ws, &pool));
  std::printf("warm-up prefill (untimed): %lld x %lld tokens in %.3f s\n",
              static_cast<long long>(batch), static_cast<long long>(prefill.num_tokens() / batch),
              Seconds(t0));
  return Status::Ok();
}

// Prefill tok/s of batch x prompt_len random ids in a fresh cache (the
// further lengths of --prompt-len); prints its line, the ratio to the first
// length's tok/s, and its compute line.
Status RunExtraPrefill(const model::Model& model, int64_t batch, int64_t prompt_len,
                       int64_t first_len, double first_tps, const std::vector<PeakRate>& peaks,
                       bool warmup, ThreadPool& pool) {
  const checkpoint::ModelConfig& cfg = model.config();
  auto cache = model.NewCache(batch);
  model::Workspace ws;
  std::mt19937 rng(static_cast<uint32_t>(1234 + prompt_len));
  const model::ForwardBatch prefill = RandomPrompts(batch, prompt_len, cfg.vocab_size, rng);
  std::vector<float> logits(static_cast<size_t>(batch * cfg.vocab_size));
  model::ForwardOutputs out;
  out.logits = logits.data();
  if (warmup) DSV4_RETURN_IF_ERROR(WarmUpPrefill(model, batch, prefill, out, ws, pool));
  const auto t0 = std::chrono::steady_clock::now();
  DSV4_RETURN_IF_ERROR(model.Forward(prefill, *cache, out, ws, &pool));
  const double sec = Seconds(t0);
  const double tps = static_cast<double>(prefill.num_tokens()) / sec;
  std::printf("prefill: %lld x %lld tokens in %.3f s = %.1f tok/s (x%.3f the %lld-token prefill)\n",
              static_cast<long long>(batch), static_cast<long long>(prompt_len), sec, tps,
              first_tps > 0 ? tps / first_tps : 0.0, static_cast<long long>(first_len));
  std::printf(
      "%s",
      FormatPrefillCompute(prompt_len, tps, CountPrefillFlops(model, prompt_len), peaks).c_str());
  std::fflush(stdout);
  return Status::Ok();
}

// The decode windows' measured weight stream (window w: bytes[w] in sec[w],
// the steps between triad passes w and w + 1) against the passes around
// each (PairWindowsWithPasses): one line.
void PrintPairedDecodeRatio(const std::vector<double>& bytes, const std::vector<double>& sec,
                            const std::vector<double>& passes, int64_t steps_per_window) {
  std::vector<double> gbps;
  for (size_t w = 0; w < bytes.size(); ++w) gbps.push_back(bytes[w] / sec[w] / 1e9);
  const PairedRatios paired = PairWindowsWithPasses(gbps, passes);
  std::printf(
      "decode measured weight stream per window of %lld steps / the mean of the triad passes "
      "before and after it: median %.1f%% (quartiles %.1f-%.1f%%, %zu windows)\n",
      static_cast<long long>(steps_per_window), 100.0 * paired.median, 100.0 * paired.q1,
      100.0 * paired.q3, paired.windows);
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
  if (Status resident = launch::MakeResident(args.residency.populate, args.residency.mlock,
                                             (*model_or)->checkpoint().DroppedRanges());
      !resident.ok()) {
    std::cerr << "dsv4 bench: " << resident.message() << "\n";
    return ExitCodeFor(resident);
  }
  // The bare loop's model: no engine memory plan here, the move's own
  // MemAvailable guard applies.
  if (args.residency.hugepages) {
    DSV4_LOG_INFO("{}",
                  launch::MoveCheckpointsToHugePages((*model_or)->checkpoint().DroppedRanges()));
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
  for (int64_t len : args.prompt_lens) {
    if (len > cfg.max_position_embeddings) {
      std::cerr << "dsv4 bench: --prompt-len " << len << " exceeds the model's "
                << cfg.max_position_embeddings << " positions\n";
      return 2;
    }
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
  std::vector<double> reads;
  for (int r = 0; r < 5; ++r) reads.push_back(triad_arrays.ReadPass());
  const TriadResult read =
      SummarizeTriad(std::move(reads), triad_arrays.array_bytes(), pool.num_threads());
  std::printf(
      "memory read bandwidth (2 x %lld MiB read, nothing written): best %.2f GB/s, median %.2f "
      "GB/s\n",
      static_cast<long long>(args.triad_mib), read.best_gbps, read.median_gbps);
  // Peak compute per instruction mix on the same pool: the prefill lines
  // divide by its medians.
  const std::vector<PeakRate> peaks = MeasurePeakCompute(&pool);
  std::printf("%s", FormatPeakRates(peaks).c_str());

  double weight_bytes = 0;
  const double touch_sec = TouchWeights(model.checkpoint(), &weight_bytes);
  std::printf("weights paged in: %.1f MiB in %.2f s (not timed below)\n", weight_bytes / (1 << 20),
              touch_sec);

  auto cache = model.NewCache(args.batch);
  model::Workspace ws;
  Status s;
  std::mt19937 rng(1234);
  const model::ForwardBatch prefill =
      RandomPrompts(args.batch, args.prompt_len, cfg.vocab_size, rng);
  std::vector<float> logits(static_cast<size_t>(args.batch * cfg.vocab_size));
  model::ForwardOutputs out;
  out.logits = logits.data();
  profile::SetThreadName("main");
  if (args.warmup) {
    s = WarmUpPrefill(model, args.batch, prefill, out, ws, pool);
    if (!s.ok()) {
      std::cerr << "dsv4 bench: " << s.message() << "\n";
      return 1;
    }
  }
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
  const double prefill_tps = static_cast<double>(prefill.num_tokens()) / prefill_sec;
  std::printf("prefill: %lld x %lld tokens in %.3f s = %.1f tok/s\n",
              static_cast<long long>(args.batch), static_cast<long long>(args.prompt_len),
              prefill_sec, prefill_tps);
  std::printf("%s", FormatPrefillCompute(args.prompt_len, prefill_tps,
                                         CountPrefillFlops(model, args.prompt_len), peaks)
                        .c_str());

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
  // The routing each step took (an observer of the forward, marked per MoE
  // layer): the weight bytes the step read, counted after its timing.
  const DecodeWeightBytes weights = CountDecodeWeightBytes(model);
  model::ExpertUsage usage(cfg.num_layers_with_mtp(), cfg.n_routed_experts);
  out.expert_usage = &usage;
  double measured_bytes = 0;  // summed over the steps
  int64_t experts_touched = 0;
  // Per window of kStepsPerTriad steps (between two triad passes): measured
  // bytes and seconds, for the paired ratio.
  std::vector<double> window_bytes, window_sec;
  for (int64_t step = 0; step < args.decode_steps; ++step) {
    if (step % kStepsPerTriad == 0) {
      interleaved.push_back(triad_arrays.Pass());
      window_bytes.push_back(0);
      window_sec.push_back(0);
    }
    usage.Clear();
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
    const double step_sec = Seconds(t0);
    decode_sec += step_sec;
    std::vector<int32_t> ids = batch.token_ids;
    std::sort(ids.begin(), ids.end());
    const auto distinct_ids = std::unique(ids.begin(), ids.end()) - ids.begin();
    const double step_bytes = weights.Step(usage, distinct_ids);
    measured_bytes += step_bytes;
    window_bytes.back() += step_bytes;
    window_sec.back() += step_sec;
    experts_touched += usage.TotalDistinct();
  }
  out.expert_usage = nullptr;
  interleaved.push_back(triad_arrays.Pass());
  const TriadResult alongside =
      SummarizeTriad(interleaved, triad_arrays.array_bytes(), pool.num_threads());
  Result<profile::SessionSummary> trace = profile::SessionSummary{};
  if (profile_flags->enabled && !(trace = StopProfile("dsv4 bench")).ok()) return 1;
  const double steps_per_sec = static_cast<double>(args.decode_steps) / decode_sec;
  std::printf("decode: %lld steps x batch %lld in %.3f s = %.2f tok/s (%.2f ms/step)\n",
              static_cast<long long>(args.decode_steps), static_cast<long long>(args.batch),
              decode_sec, steps_per_sec * static_cast<double>(args.batch), 1e3 / steps_per_sec);
  const double bytes = weights.EstimatePerToken(cfg.num_experts_per_tok);
  std::printf("weight bytes per decode token (batch 1): %.1f MiB\n", bytes / (1 << 20));
  if (args.batch == 1) {
    const double achieved = bytes * steps_per_sec / 1e9;
    std::printf("achieved weight stream %.2f GB/s = %.1f%% of triad best, %.1f%% of read best\n",
                achieved, 100.0 * achieved / triad.best_gbps, 100.0 * achieved / read.best_gbps);
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
  {
    const double tokens = static_cast<double>(args.decode_steps * args.batch);
    const int64_t moe_layers = cfg.num_hidden_layers * args.decode_steps;
    std::printf(
        "weight bytes per decode token, measured from the routing (batch %lld; per step the union "
        "of the experts its rows selected in each MoE layer, dense tensors once, its embedding "
        "rows; / %lld tokens): %.1f MiB (routed experts per MoE layer per step: mean %.2f of "
        "%lld)\n",
        static_cast<long long>(args.batch), static_cast<long long>(args.batch),
        measured_bytes / tokens / (1 << 20),
        static_cast<double>(experts_touched) / static_cast<double>(moe_layers),
        static_cast<long long>(cfg.n_routed_experts));
    const double achieved = measured_bytes / decode_sec / 1e9;
    std::printf(
        "decode measured weight stream %.2f GB/s = %.1f%% of the interleaved triad median\n",
        achieved, 100.0 * achieved / alongside.median_gbps);
    PrintPairedDecodeRatio(window_bytes, window_sec, interleaved, kStepsPerTriad);
  }
  if (profile_flags->enabled) PrintOpTables(*trace, args.batch);
  for (size_t i = 1; i < args.prompt_lens.size(); ++i) {
    s = RunExtraPrefill(model, args.batch, args.prompt_lens[i], args.prompt_len, prefill_tps, peaks,
                        args.warmup, pool);
    if (!s.ok()) {
      std::cerr << "dsv4 bench: " << s.message() << "\n";
      return 1;
    }
  }
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
  cmd->add_option("--prompt-len", args->prompt_lens,
                  "Prompt tokens per sequence; a list N,N2,... also times a prefill of each "
                  "further length in a fresh cache (decode continues from N)")
      ->delimiter(',')
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
  cmd->add_flag("--warmup,!--no-warmup", args->warmup,
                "Run an untimed prefill of the same shape before each timed one, as llama-bench "
                "does (on by default; --no-warmup times the process's first prefill)");
  AddProfileFlags(cmd, &args->profile);
  cmd->callback([args, exit_code] {
    if (args->prompt_lens.empty()) {
      std::cerr << "dsv4 bench: --prompt-len needs at least one length\n";
      *exit_code = 2;
      return;
    }
    args->prompt_len = args->prompt_lens.front();
    *exit_code = RunBench(*args);
  });
}

}  // namespace dsv4::cli
