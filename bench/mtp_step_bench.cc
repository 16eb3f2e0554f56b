// MTP step cost (docs/performance.md "MTP step cost"): what one decode step
// costs with K = 0 and with K = 1 (verify [tail, draft] + draft the next
// token), and where the difference goes.
//
// Every round runs, back to back and in alternating order, `--steps` steps of:
//   exec0  ModelExecutor::Run with K = 0   (the engine's plain decode step)
//   exec1  ModelExecutor::Run with K = 1   (verify 2 rows + MTP draft)
//   fwd1   Model::Forward, 1 row per sequence, its logits
//   fwd2   Model::Forward, 2 rows per sequence, both rows' logits
//   mtp1   Model::ForwardMtp, 1 row per sequence, its (draft) logits
// each on its own cache, so machine drift hits all of them alike; the report
// gives each one's median step time and the ratios.  exec1 - (fwd2 + mtp1)
// is what the executor adds around the two forwards (sampling, bookkeeping,
// proposer).  Random weights: drafts are (almost) never accepted, so exec1
// measures the cost of a K = 1 step, not its gain.
//
// Bytes: the weights one step must read at batch 1 (dense tensors once,
// routed experts of the union of the step's rows per layer, one embedding
// row per row, the MTP block and the head a second time for the draft),
// counted from the checkpoint and the routing the forwards actually chose.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "model/model.h"
#include "runner/model_executor.h"

namespace dsv4 {
namespace {

struct Args {
  std::string model;
  int64_t batch = 1;
  int64_t prompt_len = 128;
  int64_t steps = 64;  // per part and round (each round starts again from the prompts)
  int64_t rounds = 8;
  int threads = 0;
  std::string only;  // run only this part (profiling); empty = all
  // Interleave the parts step by step (a bandwidth-bound model on a busy
  // machine) instead of `steps` steps of one part at a time (keeps each
  // part's caches warm, like a real decode loop).
  bool interleave = false;
};

// Wall time and the process's CPU time (all threads, spinning included):
// on a shared machine the CPU time of a one-thread run is the stable figure.
struct Clock {
  double wall = 0, cpu = 0;
  static Clock Now() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return {
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
        static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec)};
  }
  Clock operator-(const Clock& o) const { return {wall - o.wall, cpu - o.cpu}; }
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "mtp_step_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& s) {
  if (!s.ok()) Die(s.ToString());
}

// Decode steps through a ModelExecutor with K drafts per step (self-managed
// cache, hand-made plans: the scheduler is not timed).
class ExecutorLoop {
 public:
  ExecutorLoop(const model::Model& model, ThreadPool* pool, const Args& args, int32_t k,
               const std::vector<std::vector<int32_t>>& prompts)
      : k_(k), prompts_(prompts), prompt_len_(args.prompt_len) {
    runner::ModelExecutorOptions o;
    o.slots_per_partition = static_cast<int32_t>(args.batch);
    o.num_speculative_tokens = k;
    auto ex = runner::ModelExecutor::Create(model, pool, o);
    if (!ex.ok()) Die(ex.status().ToString());
    ex_ = std::move(*ex);
    Restart();
  }

  // Every sequence starts again from its prompt (a new generation of its
  // slot: the executor resets the slot), untimed.
  void Restart() {
    ++generation_;
    engine::StepPlan plan;
    plan.step_id = ++step_id_;
    for (size_t b = 0; b < prompts_.size(); ++b) {
      engine::ScheduledRequest e;
      e.id = static_cast<engine::RequestId>(b + 1);
      e.slot = static_cast<int32_t>(b);
      e.generation = generation_;
      e.is_new = true;
      e.num_prompt_tokens = prompt_len_;
      e.token_ids = prompts_[b];
      e.num_padded_tokens = e.num_tokens();
      e.needs_logits = true;
      plan.requests.push_back(e);
    }
    Apply(plan, Run(plan));
  }

  // One decode step of every sequence; returns its wall time.
  Clock Step() {
    engine::StepPlan plan;
    plan.step_id = ++step_id_;
    for (size_t b = 0; b < pos_.size(); ++b) {
      engine::ScheduledRequest e;
      e.id = static_cast<engine::RequestId>(b + 1);
      e.slot = static_cast<int32_t>(b);
      e.generation = generation_;
      e.start_pos = pos_[b];
      e.token_ids.assign(1, tail_[b]);
      e.token_ids.insert(e.token_ids.end(), static_cast<size_t>(k_), engine::kDraftToken);
      e.num_draft = k_;
      e.num_padded_tokens = e.num_tokens();
      e.needs_logits = true;
      e.decode = true;
      plan.requests.push_back(std::move(e));
    }
    const Clock t0 = Clock::Now();
    engine::StepResult r = Run(plan);
    const Clock dt = Clock::Now() - t0;
    Apply(plan, r);
    return dt;
  }

  int64_t accepted() const { return spec_.num_accepted_tokens; }
  int64_t drafts() const { return spec_.num_draft_tokens; }

 private:
  engine::StepResult Run(const engine::StepPlan& plan) {
    auto r = ex_->Run(plan);
    if (!r.ok()) Die(r.status().ToString());
    if (r->requests.size() != plan.requests.size()) Die("executor left a request out");
    return std::move(*r);
  }
  void Apply(const engine::StepPlan& plan, const engine::StepResult& r) {
    pos_.resize(plan.requests.size());
    tail_.resize(plan.requests.size());
    for (size_t b = 0; b < plan.requests.size(); ++b) {
      const engine::ScheduledRequest& e = plan.requests[b];
      const engine::RequestResult& rr = r.requests[b];
      pos_[b] = e.start_pos + e.num_real_tokens() + rr.num_accepted_drafts;
      tail_[b] = rr.tokens.back();
      if (e.needs_logits) spec_.Add(e.num_draft, rr.num_accepted_drafts);
    }
  }

  int32_t k_;
  std::vector<std::vector<int32_t>> prompts_;
  int64_t prompt_len_;
  std::unique_ptr<runner::ModelExecutor> ex_;
  uint32_t generation_ = 0;
  uint64_t step_id_ = 0;
  std::vector<int64_t> pos_;
  std::vector<int32_t> tail_;
  engine::SpecStats spec_;  // from the step results
};

// Bare model calls on their own cache: `rows` rows per sequence per step
// (the next step starts one position on, like a K = rows - 1 step whose
// drafts are all rejected), logits of every row; with `mtp`, ForwardMtp
// instead on the main streams of a plain forward.
class ForwardLoop {
 public:
  ForwardLoop(const model::Model& model, ThreadPool* pool, const Args& args, int64_t rows, bool mtp,
              const std::vector<std::vector<int32_t>>& prompts)
      : model_(model),
        pool_(pool),
        rows_(rows),
        mtp_(mtp),
        prompts_(prompts),
        prompt_len_(args.prompt_len),
        rng_(7 + rows + (mtp ? 100 : 0)) {
    model::CacheOptions co;
    co.ring_capacity = model.config().sliding_window + rows - 1;
    co.mtp_ring_capacity = model.config().sliding_window + 1;
    co.include_mtp = mtp;
    cache_ = model.NewCache(args.batch, co);
    Restart();
  }

  // Every sequence starts again from its prompt, untimed.
  void Restart() {
    const auto batch_size = static_cast<int64_t>(prompts_.size());
    model::ForwardBatch prefill;
    for (int64_t b = 0; b < batch_size; ++b) {
      cache_->Reset(b);
      prefill.Add(b, 0, prompts_[static_cast<size_t>(b)]);
    }
    streams_.resize(static_cast<size_t>(prefill.num_tokens() * model_.stream_width()));
    model::ForwardOutputs out;
    out.streams = streams_.data();
    Check(model_.Forward(prefill, *cache_, out, ws_, pool_));
    pos_.assign(static_cast<size_t>(batch_size), prompt_len_);
    if (!mtp_) return;
    // MTP rows [0, prompt_len - 1): (h_q, token_{q+1}).
    model::ForwardBatch mb;
    std::vector<bf16> h;
    const int64_t w = model_.stream_width();
    for (int64_t b = 0; b < batch_size; ++b) {
      const auto& p = prompts_[static_cast<size_t>(b)];
      mb.Add(b, 0, std::vector<int32_t>(p.begin() + 1, p.end()));
      const bf16* src = streams_.data() + prefill.seqs[static_cast<size_t>(b)].row_offset * w;
      h.insert(h.end(), src, src + (prompt_len_ - 1) * w);
    }
    std::vector<bf16> o(h.size());
    model::ForwardOutputs mo;
    mo.streams = o.data();
    Check(model_.ForwardMtp(mb, h.data(), *cache_, mo, ws_, pool_));
    pos_.assign(static_cast<size_t>(batch_size), prompt_len_ - 1);
    h_.assign(h.begin(), h.begin() + batch_size * w);  // any streams will do
  }

  Clock Step(model::ModelTrace* trace = nullptr, model::BlockTrace* mtp_trace = nullptr) {
    model::ForwardBatch batch;
    const auto vocab = static_cast<uint32_t>(model_.config().vocab_size);
    for (size_t b = 0; b < pos_.size(); ++b) {
      std::vector<int32_t> ids(static_cast<size_t>(rows_));
      for (auto& id : ids) id = static_cast<int32_t>(rng_() % vocab);
      batch.Add(static_cast<int64_t>(b), pos_[b], ids);
      for (int64_t r = 0; r < rows_; ++r)
        batch.logit_rows.push_back(batch.num_tokens() - rows_ + r);
    }
    logits_.resize(batch.logit_rows.size() * vocab);
    streams_.resize(static_cast<size_t>(batch.num_tokens() * model_.stream_width()));
    model::ForwardOutputs out;
    out.logits = logits_.data();
    out.streams = streams_.data();
    out.approx_logits = mtp_;  // as the proposer drafts
    const Clock t0 = Clock::Now();
    if (mtp_) {
      Check(model_.ForwardMtp(batch, h_.data(), *cache_, out, ws_, pool_, mtp_trace));
    } else {
      Check(model_.Forward(batch, *cache_, out, ws_, pool_, trace));
    }
    const Clock dt = Clock::Now() - t0;
    for (int64_t& p : pos_) ++p;
    return dt;
  }

 private:
  const model::Model& model_;
  ThreadPool* pool_;
  int64_t rows_;
  bool mtp_;
  std::vector<std::vector<int32_t>> prompts_;
  int64_t prompt_len_;
  std::mt19937 rng_;
  std::unique_ptr<model::ModelCache> cache_;
  model::Workspace ws_;
  std::vector<int64_t> pos_;
  std::vector<bf16> streams_, h_;
  std::vector<float> logits_;
};

// Weight bytes of one step at batch 1 from the checkpoint's tensors and the
// experts the rows were routed to (expert_union[l] = distinct experts of
// main layer l, mtp_experts = of the MTP block).
struct StepBytes {
  double dense = 0;            // main dense tensors, head included, embedding excluded
  double embed_row = 0;        // one embedding row
  double head = 0;             // the LM head (read again by the MTP draft)
  double mtp_dense = 0;        // MTP block dense tensors (its own hc_head/norm, e/h_proj)
  std::vector<double> expert;  // [layer] bytes of one routed expert; back() = MTP
};

StepBytes CountBytes(const model::Model& model) {
  const checkpoint::ModelConfig& cfg = model.config();
  StepBytes s;
  s.expert.assign(static_cast<size_t>(cfg.num_hidden_layers + 1), 0);
  const checkpoint::Checkpoint& ck = model.checkpoint();
  for (const std::string& name : ck.Names()) {
    const TensorView* v = ck.Find(name);
    if (v == nullptr) continue;
    const auto n = static_cast<double>(v->nbytes());
    const bool mtp = name.rfind("mtp.", 0) == 0;
    if (name == "embed.weight") {
      s.embed_row = n / static_cast<double>(cfg.vocab_size);
    } else if (name.find(".ffn.experts.") != std::string::npos) {
      int64_t layer = cfg.num_hidden_layers;
      if (!mtp) layer = std::atoll(name.c_str() + std::strlen("layers."));
      s.expert[static_cast<size_t>(layer)] += n / static_cast<double>(cfg.n_routed_experts);
    } else if (mtp) {
      s.mtp_dense += n;
    } else {
      s.dense += n;
      if (name == "head.weight") s.head = n;
    }
  }
  return s;
}

// Profiling only the timed steps: with MTP_BENCH_PERF_CTL=<fifo> (perf record
// --control fifo:<fifo> -D -1) the recording is enabled around the timed
// loops and disabled during restarts.
class PerfControl {
 public:
  PerfControl() {
    const char* path = std::getenv("MTP_BENCH_PERF_CTL");
    if (path != nullptr) f_ = std::fopen(path, "w");
  }
  ~PerfControl() {
    if (f_ != nullptr) std::fclose(f_);
  }
  void Set(bool on) {
    if (f_ == nullptr) return;
    std::fputs(on ? "enable\n" : "disable\n", f_);
    std::fflush(f_);
  }

 private:
  std::FILE* f_ = nullptr;
};

int Main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--model") {
      args.model = next();
    } else if (a == "--batch") {
      args.batch = std::atoll(next().c_str());
    } else if (a == "--prompt-len") {
      args.prompt_len = std::atoll(next().c_str());
    } else if (a == "--steps") {
      args.steps = std::atoll(next().c_str());
    } else if (a == "--rounds") {
      args.rounds = std::atoll(next().c_str());
    } else if (a == "--threads") {
      args.threads = std::atoi(next().c_str());
    } else if (a == "--only") {
      args.only = next();
    } else if (a == "--interleave") {
      args.interleave = true;
    } else {
      Die("usage: mtp_step_bench --model DIR [--batch B] [--prompt-len N] [--steps S] "
          "[--rounds R] [--threads T] [--only exec0|exec1|fwd1|fwd2|mtp1] [--interleave]");
    }
  }
  if (args.model.empty() || args.batch < 1 || args.prompt_len < 2 || args.steps < 1 ||
      args.rounds < 1) {
    Die("need --model, batch >= 1, prompt-len >= 2, steps >= 1, rounds >= 1");
  }
  model::ModelOptions mo;
  mo.prepacked = "off";  // checkpoint tensor names for the byte count
  auto loaded = model::Model::Load(args.model, mo);
  if (!loaded.ok()) Die(loaded.status().ToString());
  const model::Model& model = **loaded;
  if (!model.has_mtp()) Die("the checkpoint has no MTP layer");
  ThreadPool pool(args.threads > 0 ? args.threads : ThreadPool::DefaultThreads());
  const checkpoint::ModelConfig& cfg = model.config();

  std::mt19937 rng(99);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(args.batch));
  for (auto& p : prompts) {
    p.resize(static_cast<size_t>(args.prompt_len));
    for (auto& id : p) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab_size));
  }
  ExecutorLoop exec0(model, &pool, args, 0, prompts);
  ExecutorLoop exec1(model, &pool, args, 1, prompts);
  ForwardLoop fwd1(model, &pool, args, 1, false, prompts);
  ForwardLoop fwd2(model, &pool, args, 2, false, prompts);
  ForwardLoop mtp1(model, &pool, args, 1, true, prompts);
  // Untimed warm-up: workspaces and first-touch pages.
  for (int i = 0; i < 2; ++i) {
    exec0.Step(), exec1.Step(), fwd1.Step(), fwd2.Step(), mtp1.Step();
  }
  exec0.Restart(), exec1.Restart(), fwd1.Restart(), fwd2.Restart(), mtp1.Restart();

  PerfControl perf;
  const char* names[] = {"exec0", "exec1", "fwd1", "fwd2", "mtp1"};
  std::vector<std::vector<double>> t(5), cpu(5);
  std::vector<std::set<int32_t>> unions(static_cast<size_t>(cfg.num_hidden_layers));
  std::vector<double> union_sizes(static_cast<size_t>(cfg.num_hidden_layers), 0);
  int64_t traced = 0;
  for (int64_t round = 0; round < args.rounds; ++round) {
    if (round > 0) {
      exec0.Restart(), exec1.Restart(), fwd1.Restart(), fwd2.Restart(), mtp1.Restart();
    }
    auto run = [&](int p) {
      Clock dt;
      switch (p) {
        case 0:
          dt = exec0.Step();
          break;
        case 1:
          dt = exec1.Step();
          break;
        case 2:
          dt = fwd1.Step();
          break;
        case 3:
          dt = fwd2.Step();
          break;
        default:
          dt = mtp1.Step();
          break;
      }
      t[static_cast<size_t>(p)].push_back(dt.wall);
      cpu[static_cast<size_t>(p)].push_back(dt.cpu);
    };
    if (args.interleave) {
      // One step of every part in turn (rotating order): load bursts on a
      // shared machine hit all parts alike.
      for (int64_t s = 0; s < args.steps; ++s) {
        for (int part = 0; part < 5; ++part) run(static_cast<int>((part + s + round) % 5));
      }
      continue;
    }
    for (int part = 0; part < 5; ++part) {
      // Alternate the order so no part always follows the same one.
      const int p = round % 2 == 0 ? part : 4 - part;
      if (!args.only.empty() && args.only != names[p]) continue;
      perf.Set(true);
      for (int64_t s = 0; s < args.steps; ++s) run(p);
      perf.Set(false);
    }
  }
  // Routing of 2-row steps (batch 1: the union the verify reads).
  ForwardLoop trace_loop(model, &pool, args, 2, false, prompts);
  for (int64_t s = 0; s < 16; ++s) {
    model::ModelTrace tr;
    trace_loop.Step(&tr);
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      const auto& ids = tr.blocks[static_cast<size_t>(l)].expert_ids;
      std::set<int32_t> u(ids.begin(), ids.end());
      union_sizes[static_cast<size_t>(l)] += static_cast<double>(u.size());
    }
    ++traced;
  }

  std::printf(
      "model %s: %lld layers, hidden %lld, vocab %lld, %lld experts top-%lld; %d threads, "
      "batch %lld, context %lld+\n",
      args.model.c_str(), static_cast<long long>(cfg.num_hidden_layers),
      static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size),
      static_cast<long long>(cfg.n_routed_experts), static_cast<long long>(cfg.num_experts_per_tok),
      pool.num_threads(), static_cast<long long>(args.batch),
      static_cast<long long>(args.prompt_len));
  double med[5], med_cpu[5];
  for (int p = 0; p < 5; ++p) {
    const auto ps = static_cast<size_t>(p);
    if (t[ps].empty()) t[ps].push_back(0), cpu[ps].push_back(0);
    med[p] = Median(t[ps]);
    med_cpu[p] = Median(cpu[ps]);
    std::printf("  %-5s wall median %8.3f ms/step (min %.3f), CPU median %8.3f ms, %zu steps\n",
                names[p], med[p] * 1e3, *std::min_element(t[ps].begin(), t[ps].end()) * 1e3,
                med_cpu[p] * 1e3, t[ps].size());
  }
  std::printf("  K=1 step / K=0 step (exec1 / exec0): %.3f wall, %.3f CPU\n", med[1] / med[0],
              med_cpu[1] / med_cpu[0]);
  std::printf("  verify 2 rows / 1 row (fwd2 / fwd1): %.3f wall, %.3f CPU\n", med[3] / med[2],
              med_cpu[3] / med_cpu[2]);
  std::printf("  MTP forward / plain forward (mtp1 / fwd1): %.3f wall, %.3f CPU\n", med[4] / med[2],
              med_cpu[4] / med_cpu[2]);
  std::printf("  (fwd2 + mtp1) / fwd1: %.3f;  executor extra: K=0 %.3f ms, K=1 %.3f ms\n",
              (med[3] + med[4]) / med[2], (med[0] - med[2]) * 1e3,
              (med[1] - med[3] - med[4]) * 1e3);
  std::printf("  K=1 drafts accepted: %lld of %lld\n", static_cast<long long>(exec1.accepted()),
              static_cast<long long>(exec1.drafts()));

  const StepBytes sb = CountBytes(model);
  const auto k = static_cast<double>(cfg.num_experts_per_tok);
  double k0 = sb.dense + sb.embed_row, k1 = sb.dense + 2 * sb.embed_row;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    k0 += k * sb.expert[static_cast<size_t>(l)];
    k1 += union_sizes[static_cast<size_t>(l)] / static_cast<double>(traced) *
          sb.expert[static_cast<size_t>(l)];
  }
  // The draft: MTP block (1 row: top-k experts), embedding row, head again.
  const double verify = k1;
  k1 += sb.mtp_dense + k * sb.expert.back() + sb.embed_row + sb.head;
  std::printf(
      "  bytes at batch 1: K=0 %.2f MiB, K=1 %.2f MiB (MTP dense %.2f, head %.2f), "
      "ratio %.3f = verify %.3f + draft %.3f\n",
      k0 / (1 << 20), k1 / (1 << 20), sb.mtp_dense / (1 << 20), sb.head / (1 << 20), k1 / k0,
      verify / k0, (k1 - verify) / k0);
  std::printf("  mean experts per layer for 2 rows:");
  for (double u : union_sizes) std::printf(" %.2f", u / static_cast<double>(traced));
  std::printf("\n");
  if (args.batch == 1) {
    // The target of the performance issue's MTP item: a K = 1 step costs
    // what its bytes predict at the plain step's rate, within 10 %.
    const double rate = k0 / med[0];  // bytes per second of the plain 1-row step
    std::printf(
        "  plain step reads %.2f GB/s; K=1 step predicted %.3f ms (wall; CPU %.3f ms), "
        "measured %.3f ms (CPU %.3f ms): measured / predicted %.3f wall, %.3f CPU "
        "(target <= 1.10)\n",
        rate / 1e9, k1 / rate * 1e3, med_cpu[0] * (k1 / k0) * 1e3, med[1] * 1e3, med_cpu[1] * 1e3,
        (med[1] / med[0]) / (k1 / k0), (med_cpu[1] / med_cpu[0]) / (k1 / k0));
  }
  return 0;
}

}  // namespace
}  // namespace dsv4

int main(int argc, char** argv) { return dsv4::Main(argc, argv); }
