#include "launch/engine_setup.h"

#include <algorithm>

#include "base/logging.h"
#include "cache/prefix_hash.h"
#include "dist/session.h"
#include "engine/memory_budget.h"
#include "launch/compute_pool.h"
#include "launch/host_memory.h"
#include "launch/huge_pages.h"
#include "launch/ranks.h"
#include "launch/residency.h"

namespace dsv4::launch {

uint64_t PrefixCacheSalt(const model::Model& model, const EngineOptions& options,
                         int64_t slot_bytes) {
  // Everything besides the tokens that changes a page or a snapshot: the
  // model's shape and weight bytes, and the cache options (block size, K and
  // with it the ring sizes, the per-slot state bytes).  The index lives in one
  // process, so a different checkpoint means a restart and an empty cache;
  // the salt keeps hashes of different configurations apart all the same.
  const checkpoint::ModelConfig& c = model.config();
  const auto weights = static_cast<uint64_t>(model.MappedWeightBytes());
  std::vector<int32_t> words;
  for (int64_t v :
       {c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.head_dim,
        c.sliding_window, c.index_topk, c.n_routed_experts, c.num_nextn_predict_layers,
        options.block_size, int64_t{options.num_speculative_tokens}, slot_bytes}) {
    words.push_back(static_cast<int32_t>(v));
    words.push_back(static_cast<int32_t>(v >> 32));
  }
  for (int64_t r : c.compress_ratios) words.push_back(static_cast<int32_t>(r));
  words.push_back(static_cast<int32_t>(weights));
  words.push_back(static_cast<int32_t>(weights >> 32));
  return cache::HashPage(cache::RootPageHash(0x64737634u), words).lo;
}

engine::SchedulerConfig SchedulerConfigFor(const EngineOptions& o) {
  engine::SchedulerConfig c;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_num_seqs = o.max_num_seqs;
  c.long_prefill_token_threshold = o.long_prefill_token_threshold;
  c.max_model_len = o.max_model_len;
  c.prefill_tile = 1;
  c.num_speculative_tokens = o.num_speculative_tokens;
  c.num_partitions = o.dp;
  return c;
}

Result<EngineParts> BuildEngine(const model::Model& model, ThreadPool* pool,
                                const EngineOptions& options, int64_t budget_bytes,
                                std::unique_ptr<speculation::DraftProposer> proposer,
                                dist::Communicator* broadcast_plans, int32_t only_partition) {
  engine::SchedulerConfig sc = SchedulerConfigFor(options);
  DSV4_RETURN_IF_ERROR(sc.Validate());
  if (options.max_model_len > model.config().max_position_embeddings) {
    return InvalidArgument("--max-model-len {} exceeds the model's {} positions",
                           options.max_model_len, model.config().max_position_embeddings);
  }
  // The model declares its cache (groups, page geometry, bytes per page and
  // per slot, computed by the functions that size its storage); the plan,
  // the scheduler's cache manager and the executor's pools all follow it.
  const model::CacheOptions cache_options =
      runner::ModelExecutor::CacheOptionsFor(model, options.num_speculative_tokens);
  DSV4_ASSIGN_OR_RETURN(model::CacheDeclaration declared,
                        model.DeclareCache(cache_options, options.block_size));
  engine::CachePlanOptions co;
  co.budget_bytes = budget_bytes;
  co.num_partitions = options.dp;
  co.max_model_len = options.max_model_len;
  co.max_step_tokens = sc.PrefillExtent();
  co.num_spec = options.num_speculative_tokens;
  co.prefill_tile = sc.prefill_tile;
  co.max_num_seqs = options.max_num_seqs;
  co.slot_ring_bytes = declared.slot_bytes;
  // Prefix caching: a working snapshot per running request plus as many
  // published ones (docs/engine.md §7.2).
  co.snapshots_per_slot = options.enable_prefix_caching ? kSnapshotsPerSlot : 0;
  DSV4_ASSIGN_OR_RETURN(engine::CacheSetup setup,
                        engine::CreateCache(std::move(declared.groups), co));
  if (options.enable_prefix_caching) {
    DSV4_RETURN_IF_ERROR(setup.cache.EnablePrefixCaching(
        PrefixCacheSalt(model, options, declared.slot_bytes), setup.plan.num_snapshots));
  }

  // The ring "requests" of the plan are the runner's slots per partition.
  const cache::CapacityPlan& plan = setup.plan;
  sc.slots_per_partition = plan.num_ring_requests;
  runner::ModelExecutorOptions eo;
  eo.num_partitions = options.dp;
  eo.slots_per_partition = static_cast<int32_t>(plan.num_ring_requests);
  eo.num_speculative_tokens = options.num_speculative_tokens;
  eo.page_tokens = options.block_size;
  eo.only_partition = only_partition;
  eo.snapshots_per_partition = options.enable_prefix_caching ? plan.num_snapshots : 0;
  for (size_t g = 0; g < eo.pages_per_partition.size() && g < plan.num_pages.size(); ++g) {
    eo.pages_per_partition[g] = plan.num_pages[g];
  }
  EngineParts parts;
  DSV4_ASSIGN_OR_RETURN(parts.executor,
                        runner::ModelExecutor::Create(model, pool, eo, std::move(proposer)));
  const model::ModelCache& cache = parts.executor->cache();
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<engine::Scheduler> scheduler,
                        engine::Scheduler::Create(sc, std::move(setup.cache)));
  engine::Executor* runs = parts.executor.get();
  if (broadcast_plans != nullptr) {
    parts.front = std::make_unique<PlanBroadcaster>(*broadcast_plans, parts.executor.get(), model,
                                                    only_partition >= 0);
    runs = parts.front.get();
  }
  parts.core = std::make_unique<engine::EngineCore>(std::move(scheduler), runs);
  parts.plan = plan;
  const std::string model_cache = fmt::format(
      "model cache: {} slots x {} bytes of per-slot rings and compressor states, history pools "
      "cmp_c4/cmp_c128/idx of {}/{}/{} pages (lazily backed), {:.1f} MiB in all (= the plan), "
      "K = {}",
      cache.num_slots(), cache.FixedBytesPerSlot(), cache.NumPoolPages(cache::kGroupCmpC4),
      cache.NumPoolPages(cache::kGroupCmpC128), cache.NumPoolPages(cache::kGroupIdx),
      static_cast<double>(cache.AllocatedBytes()) / (1 << 20), options.num_speculative_tokens);
  DSV4_LOG_INFO("{}", model_cache);
  // vLLM's "Maximum concurrency" line: what the cache holds at full length.
  DSV4_LOG_INFO(
      "Maximum concurrency for {} tokens per request: {} requests ({} of cache; "
      "--max-num-seqs {} run at once)",
      options.max_model_len, plan.num_slots * options.dp, FormatBytes(plan.total_bytes),
      options.max_num_seqs);
  std::string prefix_line = "prefix caching: off";
  if (options.enable_prefix_caching) {
    prefix_line = fmt::format(
        "prefix caching: on, pages of {} tokens shared by hash; {} rolling-state snapshots x {} "
        "bytes = {} ({} per runner slot, in the plan above)",
        options.block_size, plan.num_snapshots * options.dp, cache.FixedBytesPerSlot(),
        FormatBytes(plan.num_snapshots * options.dp *
                    static_cast<int64_t>(cache.FixedBytesPerSlot())),
        kSnapshotsPerSlot);
  }
  DSV4_LOG_INFO("{}", prefix_line);
  parts.description = setup.description + "; " + model_cache + "; " + prefix_line;
  return parts;
}

namespace {

// What the engine thread runs on besides the executor: kept alive until the
// thread has stopped and the executor is gone.
struct Resources {
  std::unique_ptr<model::Model> model;  // null when the caller owns it
  std::unique_ptr<ThreadPool> pool;
};

Result<std::unique_ptr<engine::LocalEngine>> Start(
    const model::Model& model, std::unique_ptr<model::Model> owned, const EngineOptions& options,
    int64_t budget_bytes, std::unique_ptr<speculation::DraftProposer> proposer) {
  auto resources = std::make_shared<Resources>();
  resources->model = std::move(owned);
  DSV4_ASSIGN_OR_RETURN(resources->pool, CreateComputePool(options.threads, options.cpu_list));
  DSV4_ASSIGN_OR_RETURN(EngineParts built, BuildEngine(model, resources->pool.get(), options,
                                                       budget_bytes, std::move(proposer)));
  engine::LocalEngineConfig config;
  config.vocab_size = model.config().vocab_size;
  config.eos_token_id = model.config().eos_token_id;
  config.max_model_len = options.max_model_len;
  config.max_waiting = options.max_waiting;
  config.plan = built.plan;
  config.description = built.description;
  config.log_stats_interval_s = options.log_stats_interval_s;
  engine::LocalEngineParts parts;
  parts.resources = std::move(resources);
  parts.executor = std::move(built.executor);
  parts.core = std::move(built.core);
  return engine::LocalEngine::Start(std::move(config), std::move(parts));
}

}  // namespace

Result<std::unique_ptr<engine::LocalEngine>> StartLocalEngine(
    const model::Model& model, const EngineOptions& options, int64_t budget_bytes,
    std::unique_ptr<speculation::DraftProposer> proposer) {
  return Start(model, nullptr, options, budget_bytes, std::move(proposer));
}

Result<std::unique_ptr<engine::AsyncEngine>> CreateLocalEngine(const EngineOptions& options) {
  // Under mpirun (or asked for --ep > 1): rank 0 of an expert-parallel run.
  dist::Communicator& world = dist::World();
  DSV4_RETURN_IF_ERROR(CheckRanks(options, world));
  if (world.size() > 1) return CreateRankZeroEngine(options, world);
  model::ModelOptions model_options;
  model_options.prepacked = options.prepacked;
  model_options.prepacked_verify_threads = options.threads;
  model_options.load_threads = options.threads;
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                        model::Model::Load(options.model_dir, model_options));
  // Mapped weights sit in the page cache, which MemAvailable counts as
  // reclaimable: reserve them so the caches do not evict the weights, and
  // check weights + caches + working memory against the host (host_memory.h).
  engine::KvBudgetOptions budget;
  budget.kv_cache_memory = options.kv_cache_memory;
  budget.memory_utilization = options.memory_utilization;
  budget.resident_reserve = model->MappedWeightBytes();
  DSV4_ASSIGN_OR_RETURN(engine::MemoryInfo memory, engine::ReadMemInfo());
  DSV4_ASSIGN_OR_RETURN(HostMemoryPlan host,
                        PlanHostMemory(budget, memory, model->MappedWeightBytes(),
                                       WorkingMemoryBytes(model->config(), options)));
  DSV4_LOG_INFO("{}", host.summary);
  if (host.weights_stream) DSV4_LOG_WARN("{}", host.stream_warning);
  // Anonymous memory cannot be dropped and re-read like the page cache: the
  // weights move into huge pages only when the plan keeps them resident.
  if (options.hugepages && host.weights_stream) {
    DSV4_LOG_INFO("hugepages: skipped, the weights stream from disk and stay in the page cache");
  } else if (options.hugepages) {
    DSV4_LOG_INFO("{}", MoveCheckpointsToHugePages(model->checkpoint().DroppedRanges()));
  }
  const int64_t bytes = host.kv_bytes;
  const model::Model& ref = *model;
  const std::vector<AddressRange> dropped = model->checkpoint().DroppedRanges();
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<engine::LocalEngine> engine,
                        Start(ref, std::move(model), options, bytes, nullptr));
  // After the caches exist, so that --mlock covers them.
  DSV4_RETURN_IF_ERROR(MakeResident(options.populate, options.mlock, dropped));
  return std::unique_ptr<engine::AsyncEngine>(std::move(engine));
}

}  // namespace dsv4::launch
