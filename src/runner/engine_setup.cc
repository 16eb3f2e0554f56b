#include "runner/engine_setup.h"

#include <algorithm>

#include "base/logging.h"

namespace dsv4 {

Dsv4CacheShapes CacheShapesFor(const ModelConfig& cfg, int32_t num_speculative_tokens) {
  Dsv4CacheShapes s;
  s.num_layers = static_cast<int32_t>(cfg.num_hidden_layers);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const int64_t r = cfg.compress_ratios[static_cast<size_t>(l)];
    if (r == 4) ++s.num_csa_layers;
    if (r > 4) {
      ++s.num_hca_layers;
      s.hca_ratio = static_cast<int32_t>(r);
    }
  }
  s.num_mtp_layers = num_speculative_tokens > 0 ? 1 : 0;
  s.head_dim = static_cast<int32_t>(cfg.head_dim);
  s.index_head_dim = static_cast<int32_t>(cfg.index_head_dim);
  s.window = static_cast<int32_t>(cfg.sliding_window);
  s.csa_ratio = 4;
  return s;
}

SchedulerConfig SchedulerConfigFor(const EngineOptions& o) {
  SchedulerConfig c;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_num_seqs = o.max_num_seqs;
  c.long_prefill_token_threshold = o.long_prefill_token_threshold;
  c.max_model_len = o.max_model_len;
  c.prefill_tile = 1;
  c.num_speculative_tokens = o.num_speculative_tokens;
  c.num_partitions = o.dp;
  return c;
}

namespace {

// The model cache must be what the plan priced: per-slot ring bytes, page
// bytes of every full-history group, and in total dp x the plan's bytes.
Status CheckCacheAgainstPlan(const ModelCache& cache, const std::vector<CacheGroupSpec>& groups,
                             const CapacityPlan& plan, int64_t slot_ring_bytes,
                             int32_t num_partitions) {
  static constexpr int kGroupOf[kNumHistoryGroups] = {kGroupCmpC4, kGroupCmpC128, kGroupIdx};
  for (int h = 0; h < kNumHistoryGroups; ++h) {
    const CacheGroupSpec& spec = groups[static_cast<size_t>(kGroupOf[h])];
    const auto model_bytes = static_cast<int64_t>(cache.PageBytes(static_cast<HistoryGroup>(h)));
    if (model_bytes != spec.page_bytes) {
      return FailedPrecondition(
          "cache group {}: the capacity plan prices {} bytes per page but the model's storage "
          "takes {} (row format of the plan and the runner disagree)",
          spec.name, spec.page_bytes, model_bytes);
    }
  }
  if (static_cast<int64_t>(cache.FixedBytesPerSlot()) != slot_ring_bytes) {
    return FailedPrecondition("per-slot rings: planned {} bytes, the model holds {}",
                              slot_ring_bytes, cache.FixedBytesPerSlot());
  }
  if (static_cast<int64_t>(cache.AllocatedBytes()) != plan.total_bytes * num_partitions) {
    return FailedPrecondition("model cache takes {} bytes, the plan {} x {} partitions",
                              cache.AllocatedBytes(), plan.total_bytes, num_partitions);
  }
  return Status::Ok();
}

}  // namespace

Result<EngineParts> BuildEngine(const Model& model, ThreadPool* pool, const EngineOptions& options,
                                int64_t budget_bytes, std::unique_ptr<DraftProposer> proposer) {
  SchedulerConfig sc = SchedulerConfigFor(options);
  DSV4_RETURN_IF_ERROR(sc.Validate());
  if (options.max_model_len > model.config().max_position_embeddings) {
    return InvalidArgument("--max-model-len {} exceeds the model's {} positions",
                           options.max_model_len, model.config().max_position_embeddings);
  }
  // Rings and compressor states are per-slot storage (docs/engine.md §4):
  // the plan charges each slot exactly what the model allocates for it.
  const CacheOptions cache_options =
      ModelExecutor::CacheOptionsFor(model, options.num_speculative_tokens);
  CacheSetupOptions co;
  co.shapes = CacheShapesFor(model.config(), options.num_speculative_tokens);
  co.storage = CacheStorage::Bf16(co.shapes);
  co.block_size = static_cast<int32_t>(options.block_size);
  co.budget_bytes = budget_bytes;
  co.num_partitions = options.dp;
  co.max_model_len = options.max_model_len;
  co.max_step_tokens = sc.PrefillExtent();
  co.num_spec = options.num_speculative_tokens;
  co.prefill_tile = sc.prefill_tile;
  co.max_num_seqs = options.max_num_seqs;
  co.slot_ring_bytes = static_cast<int64_t>(model.CacheFixedBytesPerSlot(cache_options));
  DSV4_ASSIGN_OR_RETURN(CacheSetup setup, CreateDsv4Cache(co));

  // The ring "requests" of the plan are the runner's slots per partition.
  const CapacityPlan& plan = setup.plan;
  sc.slots_per_partition = plan.num_ring_requests;
  ModelExecutorOptions eo;
  eo.num_partitions = options.dp;
  eo.slots_per_partition = static_cast<int32_t>(plan.num_ring_requests);
  eo.num_speculative_tokens = options.num_speculative_tokens;
  eo.page_tokens = options.block_size;
  eo.pages_per_partition = {plan.num_pages[kGroupCmpC4], plan.num_pages[kGroupCmpC128],
                            plan.num_pages[kGroupIdx]};
  EngineParts parts;
  DSV4_ASSIGN_OR_RETURN(parts.executor,
                        ModelExecutor::Create(model, pool, eo, std::move(proposer)));
  const ModelCache& cache = parts.executor->cache();
  DSV4_RETURN_IF_ERROR(
      CheckCacheAgainstPlan(cache, setup.cache.groups(), plan, co.slot_ring_bytes, options.dp));
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                        Scheduler::Create(sc, std::move(setup.cache)));
  parts.core = std::make_unique<EngineCore>(std::move(scheduler), parts.executor.get());
  parts.plan = plan;
  const std::string model_cache = fmt::format(
      "model cache: {} slots x {} bytes of per-slot rings and compressor states, history pools "
      "cmp_c4/cmp_c128/idx of {}/{}/{} pages (lazily backed), {:.1f} MiB in all (= the plan), "
      "K = {}",
      cache.num_slots(), cache.FixedBytesPerSlot(), cache.NumPoolPages(kHistC4),
      cache.NumPoolPages(kHistC128), cache.NumPoolPages(kHistIdx),
      static_cast<double>(cache.AllocatedBytes()) / (1 << 20), options.num_speculative_tokens);
  DSV4_LOG_INFO("{}", model_cache);
  parts.description = setup.description + "; " + model_cache;
  return parts;
}

}  // namespace dsv4
