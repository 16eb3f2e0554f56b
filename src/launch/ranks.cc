#include "launch/ranks.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "base/checksum.h"
#include "base/clock.h"
#include "base/cpu_topology.h"
#include "base/logging.h"
#include "base/sha256.h"
#include "checkpoint/prepacked.h"
#include "dist/session.h"
#include "engine/local_engine.h"
#include "engine/memory_budget.h"
#include "launch/compute_pool.h"
#include "launch/engine_setup.h"
#include "launch/host_memory.h"
#include "launch/numa_placement.h"
#include "launch/plan_codec.h"
#include "launch/residency.h"

namespace dsv4::launch {
namespace {

using Clock = std::chrono::steady_clock;

// What rank 0 sends: a header (idle wait on the followers), then its payload.
// kKeepAlive carries nothing: rank 0 sends it when it has sent nothing else
// for a quarter of --dist-timeout, so an idle follower can tell a quiet rank
// 0 from a hung one (docs/scale-out.md "Faults").
enum class Message : uint32_t { kEngine = 1, kPlan = 2, kEndEngine = 3, kExit = 4, kKeepAlive = 5 };
struct Header {
  Message kind = Message::kExit;
  // Rank 0's promise: its next header comes within this many milliseconds
  // (--dist-timeout; 0 = no promise, wait forever).
  uint32_t next_within_ms = 0;
  uint64_t bytes = 0;
};

void Fatal(dist::Communicator& world, const Status& s) {
  world.Abort(fmt::format("dsv4: rank {}: {}", world.rank(), s.ToString()), 1);
}

uint32_t Milliseconds(double seconds) {
  return static_cast<uint32_t>(std::clamp(seconds * 1e3, 0.0, 4e9));
}

// Rank 0's side of the conversation with the followers.  Every MPI call of
// rank 0 happens under lock(): the engine thread's steps (plan and the
// model's exchanges), the main thread's engine start and end, and the
// keep-alive thread, which MPI_THREAD_SERIALIZED requires and which keeps
// the followers' stream of headers in one order.  The keep-alive thread
// sends kKeepAlive once nothing was sent or run for interval (a quarter of
// --dist-timeout): while steps follow each other it never sends, and a step
// costs one uncontended lock and a clock read more.  One per process, like
// dist::World() (rank 0 has one conversation); started by the first engine,
// stopped by ReleaseFollowers.
class Leader {
 public:
  static Leader& Of(dist::Communicator& world) {
    static Leader leader(world);
    return leader;
  }
  ~Leader() { Stop(); }

  // Recursive: an engine whose start fails after its PlanBroadcaster exists
  // destroys it (kEndEngine) inside the start's own locked region.
  std::recursive_mutex& lock() { return mu_; }

  // REQUIRES lock() held.  Starts the keep-alive thread the first time.
  void SetTimeout(double seconds) {
    timeout_s_ = seconds;
    if (!thread_.joinable() && !stopped_) thread_ = std::thread([this] { KeepAlive(); });
    cv_.notify_all();
  }

  // REQUIRES lock() held.
  void Send(Message kind, const std::vector<uint8_t>& payload) {
    Header h{kind, Milliseconds(timeout_s_), payload.size()};
    Status s = world_.BroadcastIdle(&h, sizeof(h), 0, timeout_s_);
    if (s.ok() && !payload.empty()) {
      s = world_.Broadcast(const_cast<uint8_t*>(payload.data()),
                           static_cast<int64_t>(payload.size()), 0);
    }
    if (!s.ok()) Fatal(world_, s);
    Touch();
  }

  // REQUIRES lock() held.  Rank 0 just talked to the followers (a step).
  void Touch() { last_ = Clock::now(); }

  int64_t keep_alives() const { return keep_alives_; }
  // REQUIRES lock() held.
  RankTraffic& last_traffic() { return last_traffic_; }

  void Stop() {
    {
      std::lock_guard<std::recursive_mutex> l(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  explicit Leader(dist::Communicator& world) : world_(world) {}

  void KeepAlive() {
    std::unique_lock<std::recursive_mutex> l(mu_);
    while (!stopped_) {
      if (timeout_s_ <= 0) {
        cv_.wait(l);
        continue;
      }
      const auto due = last_ + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(timeout_s_ / 4));
      if (Clock::now() < due) {
        cv_.wait_until(l, due);
        continue;
      }
      Send(Message::kKeepAlive, {});
      ++keep_alives_;
    }
  }

  dist::Communicator& world_;
  std::recursive_mutex mu_;
  std::condition_variable_any cv_;
  std::thread thread_;
  double timeout_s_ = 0;
  Clock::time_point last_ = Clock::now();
  int64_t keep_alives_ = 0;
  RankTraffic last_traffic_;
  bool stopped_ = false;
};

// A follower's next header: waits as long as the previous header promised
// (forever before the first), skipping keep-alives.
Header Receive(dist::Communicator& world, double* deadline_s, std::vector<uint8_t>* payload) {
  for (;;) {
    Header h;
    Status s = world.BroadcastIdle(&h, sizeof(h), 0, *deadline_s);
    if (s.ok()) *deadline_s = h.next_within_ms / 1e3;
    if (s.ok() && h.kind == Message::kKeepAlive) continue;
    payload->resize(h.bytes);
    if (s.ok() && h.bytes > 0) {
      s = world.Broadcast(payload->data(), static_cast<int64_t>(h.bytes), 0);
    }
    if (!s.ok()) Fatal(world, s);
    return h;
  }
}

// The binary (its bytes) and the checkpoint (config.json, the tensor -> shard
// map, every shard's name and size; not its mtime, which differs between
// copies on different hosts).
Result<std::string> Fingerprint(const model::Model& model) {
  DSV4_ASSIGN_OR_RETURN(checkpoint::PrepackedSource src,
                        checkpoint::DescribePrepackedSource(model.checkpoint(), 1));
  Sha256 h;
  const int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("/proc/self/exe: cannot open");
  const off_t size = ::lseek(fd, 0, SEEK_END);
  Result<uint64_t> exe = ChecksumOfFile(fd, 0, static_cast<uint64_t>(size), "/proc/self/exe");
  ::close(fd);
  if (!exe.ok()) return exe.status();
  std::string text = "binary " + ChecksumHex(*exe) + " config " + src.config_sha256 + " map " +
                     src.weight_map_sha256;
  for (const auto& shard : src.shards) text += fmt::format(" {}:{}", shard.name, shard.size);
  h.Update(text.data(), text.size());
  return h.FinishHex();
}

// What each rank reports at a start-up agreement point.
struct Record {
  int32_t ok = 0;
  int32_t code = 0;           // StatusCode of the failure
  int64_t value = 0;          // the rank's cache budget in the first agreement
  char fingerprint[72] = {};  // 64 hex digits
  char message[432] = {};     // the failure, truncated
};

// Every rank contributes its status (and fingerprint, value); all ranks get
// the same verdict: the first failing rank's error, or a fingerprint that
// differs from rank 0's.  *value receives the smallest value of all ranks.
Status Agree(dist::Communicator& world, const Status& local, const std::string& fingerprint,
             int64_t* value) {
  Record mine;
  mine.ok = local.ok() ? 1 : 0;
  mine.code = static_cast<int32_t>(local.code());
  mine.value = *value;
  std::snprintf(mine.fingerprint, sizeof(mine.fingerprint), "%s", fingerprint.c_str());
  std::snprintf(mine.message, sizeof(mine.message), "%s", local.message().c_str());
  std::vector<Record> all(static_cast<size_t>(world.size()));
  const Status s = world.AllGather(&mine, sizeof(Record), all.data());
  if (!s.ok()) Fatal(world, s);
  *value = all[0].value;
  for (const Record& x : all) *value = std::min(*value, x.value);
  for (int r = 0; r < world.size(); ++r) {
    const Record& x = all[static_cast<size_t>(r)];
    if (x.ok == 0) {
      return Status(static_cast<StatusCode>(x.code),
                    fmt::format("rank {} of {}: {}", r, world.size(), x.message));
    }
  }
  for (int r = 1; r < world.size(); ++r) {
    const Record& x = all[static_cast<size_t>(r)];
    if (std::strcmp(x.fingerprint, all[0].fingerprint) != 0) {
      return FailedPrecondition(
          "rank {} runs another binary or checkpoint than rank 0 (fingerprint {:.12} vs {:.12}): "
          "every rank needs the same dsv4 and the same model files",
          r, x.fingerprint, all[0].fingerprint);
    }
  }
  return Status::Ok();
}

// The engine of one rank: the model with this rank's experts, the compute
// pool, the executor (and, on rank 0, the core).
struct RankEngine {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<ThreadPool> pool;
  EngineParts parts;
};

// "node 0 of 2" for the NUMA nodes of this process's CPUs ("nodes 0,1 of 2"
// when its affinity spans several), from sysfs.
std::string NodeText() {
  int host_nodes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) == 0 && name.size() > 4 && std::isdigit(name[4]) != 0) ++host_nodes;
  }
  host_nodes = std::max(host_nodes, 1);
  std::set<int> nodes;
  if (Result<std::vector<CpuPlace>> places = ReadCpuPlaces(kSysCpuRoot, AffinityCpus());
      places.ok()) {
    for (const CpuPlace& p : *places) nodes.insert(p.node);
  }
  if (nodes.empty()) nodes.insert(0);
  return fmt::format("node{} {} of {}", nodes.size() > 1 ? "s" : "", fmt::join(nodes, ","),
                     host_nodes);
}

// One start-up line per rank (docs/scale-out.md "Start-up log"): where it
// runs, what it holds and what its caches hold.
void LogRankStart(const dist::Communicator& world, const RankEngine& e,
                  const std::string& fingerprint, const std::string& numa) {
  const model::Model& m = *e.model;
  const int64_t experts = m.config().n_routed_experts;
  const int64_t first = world.rank() * experts / world.size();
  const int64_t last = (world.rank() + 1) * experts / world.size();
  const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const cache::CapacityPlan& plan = e.parts.plan;
  // The plan is one partition's: with DP attention across ranks that is
  // exactly what this rank holds (its own partition's caches).
  const std::string attention =
      m.data_parallel()
          ? fmt::format("attention for DP partition {} of {}, ", world.rank(), world.size())
          : std::string();
  DSV4_LOG_INFO(
      "rank {} of {} (local rank {}, {}{}): {} compute thread{}, {}routed experts [{}, {}) of {} "
      "in every MoE layer ({:.1f} MiB), weights mapped {:.1f} MiB, cache {:.1f} MiB ({} request{} "
      "at max length), fingerprint {}",
      world.rank(), world.size(), local_rank != nullptr ? local_rank : "-", NodeText(),
      numa.empty() ? "" : ", " + numa, e.pool->num_threads(), e.pool->num_threads() == 1 ? "" : "s",
      attention, first, last, experts, static_cast<double>(m.RoutedExpertBytes()) / (1 << 20),
      static_cast<double>(m.MappedWeightBytes()) / (1 << 20),
      static_cast<double>(plan.total_bytes) / (1 << 20), plan.num_slots,
      plan.num_slots == 1 ? "" : "s", fingerprint.substr(0, 12));
}

// Loads, agrees, builds and agrees again: the same calls on every rank.
Result<std::unique_ptr<RankEngine>> BuildRankEngine(const EngineOptions& options,
                                                    dist::Communicator& world) {
  world.set_timeout_s(options.dist_timeout_s);
  world.ResetStats();  // the engine's own traffic, logged when it ends
  auto e = std::make_unique<RankEngine>();
  model::ModelOptions mo;
  mo.prepacked = options.prepacked;
  mo.prepacked_verify_threads = options.threads;
  mo.load_threads = options.threads;
  mo.expert_parallel = &world;
  mo.data_parallel = options.dp > 1;
  std::string fingerprint;
  int64_t budget = 0;
  // Each rank's own NUMA placement (--numa, auto: its local rank's node),
  // before its shard loads and its threads start; a failure goes through the
  // agreement like a failed load.
  Result<Placement> placed =
      PlaceProcess(options.numa, options.threads, options.cpu_list, LocalRank());
  Status local = placed.status();
  if (local.ok()) {
    if (Result<std::unique_ptr<model::Model>> m = model::Model::Load(options.model_dir, mo);
        m.ok()) {
      e->model = std::move(*m);
      Result<std::string> fp = Fingerprint(*e->model);
      local = fp.status();
      if (fp.ok()) fingerprint = *fp;
    } else {
      local = m.status();
    }
  }
  if (local.ok()) {
    // Every rank plans its own host's memory (its mapped share of the weights,
    // the caches, working memory) and refuses what does not fit there; the
    // agreement then gives every rank the smallest budget, because the
    // scheduler's block tables index pools that must be the same everywhere
    // (docs/scale-out.md "Memory").
    engine::KvBudgetOptions b;
    b.kv_cache_memory = options.kv_cache_memory;
    b.memory_utilization = options.memory_utilization;
    b.resident_reserve = e->model->MappedWeightBytes();
    Result<engine::MemoryInfo> memory = engine::ReadMemInfo();
    Result<HostMemoryPlan> host =
        memory.ok() ? PlanHostMemory(b, *memory, e->model->MappedWeightBytes(),
                                     WorkingMemoryBytes(e->model->config(), options))
                    : Result<HostMemoryPlan>(memory.status());
    if (host.ok()) {
      DSV4_LOG_INFO("rank {}: {}", world.rank(), host->summary);
      budget = host->kv_bytes;
    } else {
      local = host.status();
    }
  }
  DSV4_RETURN_IF_ERROR(Agree(world, local, fingerprint, &budget));
  const model::Model& m = *e->model;
  Result<std::unique_ptr<ThreadPool>> pool = CreateComputePool(options.threads, placed->cpu_list);
  local = pool.status();
  if (pool.ok()) {
    e->pool = std::move(*pool);
    // DP attention across ranks: rank r holds and runs partition r, so each
    // partition may take a whole rank's budget (the plan divides it by --dp).
    const int64_t plan_budget = options.dp > 1 ? budget * options.dp : budget;
    Result<EngineParts> parts =
        BuildEngine(m, e->pool.get(), options, plan_budget, nullptr,
                    world.rank() == 0 ? &world : nullptr, options.dp > 1 ? world.rank() : -1);
    local = parts.status();
    if (parts.ok()) e->parts = std::move(*parts);
  }
  int64_t unused = 0;
  DSV4_RETURN_IF_ERROR(Agree(world, local, fingerprint, &unused));
  LogRankStart(world, *e, fingerprint, placed->summary);
  return e;
}

// One line per rank at the end of an engine: steps, time in steps split
// into compute and communication, and what the MoE exchanges moved
// (docs/scale-out.md "Measured").
RankTraffic LogCommunication(const dist::Communicator& world, const model::Model& model,
                             RankTraffic t) {
  t.moe = model.expert_exchange_stats();
  t.hidden_size = model.config().hidden_size;
  const double per_step = t.steps > 0 ? 1e3 / static_cast<double>(t.steps) : 0.0;
  // Data-parallel: also every rank's token records (codes, scales, routing)
  // gathered before the experts run.
  const std::string dispatch = model.data_parallel() && t.moe.token_layers > 0
                                   ? fmt::format(" + {:.0f} bytes of dispatched inputs",
                                                 static_cast<double>(t.moe.dispatch_bytes) /
                                                     static_cast<double>(t.moe.token_layers))
                                   : std::string();
  DSV4_LOG_INFO(
      "rank {} of {}: {} steps in {:.3f} s ({:.2f} ms per step: compute {:.2f}, MoE exchange "
      "{:.2f}, plan broadcast {:.2f}); MoE exchanges: {} ({} token-layers, {:.0f} bytes of "
      "routed outputs{} per token per MoE layer), sent {} B, received {} B, {:.3f} s in them; "
      "all collectives: {} calls, {:.3f} s",
      world.rank(), world.size(), t.steps, t.step_seconds, t.step_seconds * per_step,
      t.compute_seconds() * per_step, t.moe.exchange_seconds * per_step, t.plan_seconds * per_step,
      t.moe.exchanges, t.moe.token_layers, t.bytes_per_token_layer(), dispatch, t.moe.bytes_sent,
      t.moe.bytes_received, t.moe.exchange_seconds, world.stats().calls, world.stats().seconds);
  return t;
}

// A follower leaves stopping to rank 0 (docs/scale-out.md "Stopping"):
// SIGINT and SIGTERM are ignored, so when mpirun forwards a SIGTERM to every
// rank, rank 0 drains and then releases the followers (kEndEngine, kExit)
// instead of a follower dying mid-step under rank 0's drain.  A follower
// still ends on rank 0's kExit, on a deadline (rank 0 silent) or on SIGKILL.
void IgnoreStopSignals() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGINT, &ignore, nullptr);
  sigaction(SIGTERM, &ignore, nullptr);
}

// DP attention across ranks: every rank's result of the step (its own
// partition's requests, or its Run's error) to rank 0, which returns them
// merged (the scheduler matches results by request id) or the first failing
// rank's error.  One all-gather of sizes and one of the bytes: results are a
// few tokens per request.  Other ranks get their own result back.
Result<engine::StepResult> GatherResults(dist::Communicator& world,
                                         Result<engine::StepResult> local) {
  const std::vector<uint8_t> mine = EncodeStepResult(local);
  const auto mine_size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(static_cast<size_t>(world.size()));
  Status s = world.AllGather(&mine_size, sizeof(int64_t), sizes.data());
  if (!s.ok()) Fatal(world, s);
  int64_t total = 0, at = 0;
  for (int r = 0; r < world.size(); ++r) {
    if (r == world.rank()) at = total;
    total += sizes[static_cast<size_t>(r)];
  }
  std::vector<uint8_t> all(static_cast<size_t>(total));
  std::copy(mine.begin(), mine.end(), all.begin() + at);
  s = world.AllGatherV(all.data() + at, all.data(), sizes);
  if (!s.ok()) Fatal(world, s);
  if (world.rank() != 0) return local;
  engine::StepResult merged;
  int64_t from = 0;
  for (int r = 0; r < world.size(); ++r) {
    const auto first = all.begin() + from;
    from += sizes[static_cast<size_t>(r)];
    bool malformed = false;
    Result<engine::StepResult> one =
        DecodeStepResult(std::vector<uint8_t>(first, all.begin() + from), &malformed);
    if (malformed) Fatal(world, Internal("rank {} sent a malformed step result", r));
    if (!one.ok()) {
      return Status(one.status().code(),
                    fmt::format("rank {} of {}: {}", r, world.size(), one.status().message()));
    }
    if (r == 0) merged.step_id = one->step_id;
    for (engine::RequestResult& q : one->requests) merged.requests.push_back(std::move(q));
  }
  return merged;
}

// Keeps what rank 0's engine thread runs on alive until it has stopped.
struct RankZeroResources {
  std::unique_ptr<RankEngine> engine;
};

}  // namespace

Status CheckRanks(const EngineOptions& options, const dist::Communicator& world) {
  if (options.ep < 1) return InvalidArgument("--ep must be at least 1, got {}", options.ep);
  if (world.size() == 1 && options.ep > 1) {
    return InvalidArgument("--ep {} needs {} ranks: start dsv4 with mpirun -np {}", options.ep,
                           options.ep, options.ep);
  }
  if (options.ep != world.size()) {
    return InvalidArgument("--ep {} but mpirun started {} ranks: give --ep {}", options.ep,
                           world.size(), world.size());
  }
  if (world.size() > 1 && options.dp > 1 && options.dp != world.size()) {
    return InvalidArgument(
        "--dp {} with {} ranks: data-parallel attention across ranks runs one partition per rank "
        "(docs/scale-out.md); give --dp {} or --dp 1",
        options.dp, world.size(), world.size());
  }
  return Status::Ok();
}

PlanBroadcaster::PlanBroadcaster(dist::Communicator& world, runner::ModelExecutor* local,
                                 const model::Model& model, bool gather_results)
    : world_(world), local_(local), model_(model), gather_results_(gather_results) {}

PlanBroadcaster::~PlanBroadcaster() {
  Leader& leader = Leader::Of(world_);
  std::lock_guard<std::recursive_mutex> l(leader.lock());
  leader.Send(Message::kEndEngine, {});
  leader.last_traffic() = LogCommunication(world_, model_, traffic_);
  DSV4_LOG_INFO("rank 0 of {}: {} keep-alives sent to idle followers so far", world_.size(),
                leader.keep_alives());
}

Result<engine::StepResult> PlanBroadcaster::Run(const engine::StepPlan& plan) {
  const auto t0 = Clock::now();
  std::vector<uint8_t> bytes = EncodePlan(plan);
  Leader& leader = Leader::Of(world_);
  std::lock_guard<std::recursive_mutex> l(leader.lock());
  const auto sent = Clock::now();
  leader.Send(Message::kPlan, bytes);
  traffic_.plan_seconds += SecondsSince(sent);
  Result<engine::StepResult> r = local_->Run(plan);
  if (gather_results_) r = GatherResults(world_, std::move(r));
  leader.Touch();
  ++traffic_.steps;
  traffic_.step_seconds += SecondsSince(t0);
  return r;
}

Result<std::unique_ptr<engine::AsyncEngine>> CreateRankZeroEngine(const EngineOptions& options,
                                                                  dist::Communicator& world) {
  DSV4_RETURN_IF_ERROR(CheckRanks(options, world));
  Result<std::unique_ptr<RankEngine>> built = Internal("unset");
  {
    Leader& leader = Leader::Of(world);
    std::lock_guard<std::recursive_mutex> l(leader.lock());
    leader.SetTimeout(options.dist_timeout_s);
    leader.Send(Message::kEngine, EncodeEngineOptions(options));
    built = BuildRankEngine(options, world);
    leader.Touch();
  }
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<RankEngine> e, std::move(built));
  const std::vector<AddressRange> dropped = e->model->checkpoint().DroppedRanges();
  engine::LocalEngineConfig config;
  config.vocab_size = e->model->config().vocab_size;
  config.eos_token_id = e->model->config().eos_token_id;
  config.max_model_len = options.max_model_len;
  config.max_waiting = options.max_waiting;
  config.plan = e->parts.plan;
  config.description = e->parts.description;
  config.log_stats_interval_s = options.log_stats_interval_s;
  engine::LocalEngineParts parts;
  parts.executor = std::move(e->parts.front);
  parts.core = std::move(e->parts.core);
  auto resources = std::make_shared<RankZeroResources>();
  resources->engine = std::move(e);
  parts.resources = std::move(resources);
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<engine::LocalEngine> engine,
                        engine::LocalEngine::Start(std::move(config), std::move(parts)));
  // Rank 0's own process (the other ranks are not sent these flags).
  DSV4_RETURN_IF_ERROR(MakeResident(options.populate, options.mlock, dropped));
  return std::unique_ptr<engine::AsyncEngine>(std::move(engine));
}

int RunFollower(dist::Communicator& world) {
  IgnoreStopSignals();
  std::vector<uint8_t> payload;
  double deadline_s = 0;  // no promise before rank 0's first header
  for (;;) {
    const Header h = Receive(world, &deadline_s, &payload);
    if (h.kind == Message::kExit) return 0;
    // An engine whose start failed on some rank after rank 0 had built its
    // broadcaster ends without steps.
    if (h.kind == Message::kEndEngine) continue;
    if (h.kind != Message::kEngine) {
      Fatal(world, Internal("expected an engine or exit message from rank 0, got {}",
                            static_cast<uint32_t>(h.kind)));
    }
    Result<EngineOptions> options = DecodeEngineOptions(payload);
    if (!options.ok()) Fatal(world, options.status());
    Result<std::unique_ptr<RankEngine>> e = BuildRankEngine(*options, world);
    if (!e.ok()) {
      // Every rank failed the same agreement; rank 0 reports it and decides.
      DSV4_LOG_ERROR("rank {}: {}", world.rank(), e.status().message());
      continue;
    }
    runner::ModelExecutor& executor = *(*e)->parts.executor;
    RankTraffic traffic;
    for (;;) {
      const Header p = Receive(world, &deadline_s, &payload);
      if (p.kind == Message::kEndEngine) break;
      if (p.kind != Message::kPlan) {
        Fatal(world, Internal("expected a step plan from rank 0, got message {}",
                              static_cast<uint32_t>(p.kind)));
      }
      Result<engine::StepPlan> plan = DecodePlan(payload);
      if (!plan.ok()) Fatal(world, plan.status());
      const auto t0 = Clock::now();
      // --dp 1: rank 0 runs the same rows and reports its result; an error
      // here is the same error there (same inputs, same arithmetic).  DP
      // attention across ranks: this rank's partition's results go to rank 0.
      Result<engine::StepResult> result = executor.Run(*plan);
      if (options->dp > 1) (void)GatherResults(world, std::move(result));
      ++traffic.steps;
      traffic.step_seconds += SecondsSince(t0);
    }
    LogCommunication(world, *(*e)->model, traffic);
  }
}

RankTraffic LastEngineTraffic() {
  dist::Communicator& world = dist::World();
  if (world.size() == 1 || world.rank() != 0) return RankTraffic();
  Leader& leader = Leader::Of(world);
  std::lock_guard<std::recursive_mutex> l(leader.lock());
  return leader.last_traffic();
}

void ReleaseFollowers(dist::Communicator& world) {
  if (world.size() == 1 || world.rank() != 0) return;
  Leader& leader = Leader::Of(world);
  leader.Stop();  // no keep-alive after kExit: the followers stop listening
  std::lock_guard<std::recursive_mutex> l(leader.lock());
  leader.Send(Message::kExit, {});
}

}  // namespace dsv4::launch
