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

Result<EngineParts> BuildEngine(const Model& model, ThreadPool* pool, const EngineOptions& options,
                                int64_t budget_bytes, std::unique_ptr<DraftProposer> proposer) {
  const SchedulerConfig sc = SchedulerConfigFor(options);
  DSV4_RETURN_IF_ERROR(sc.Validate());
  if (options.max_model_len > model.config().max_position_embeddings) {
    return InvalidArgument("--max-model-len {} exceeds the model's {} positions",
                           options.max_model_len, model.config().max_position_embeddings);
  }
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
  DSV4_ASSIGN_OR_RETURN(CacheSetup setup, CreateDsv4Cache(co));

  ModelExecutorOptions eo;
  eo.num_partitions = options.dp;
  eo.slots_per_partition = static_cast<int32_t>(options.max_num_seqs);
  eo.num_speculative_tokens = options.num_speculative_tokens;
  EngineParts parts;
  DSV4_ASSIGN_OR_RETURN(parts.executor,
                        ModelExecutor::Create(model, pool, eo, std::move(proposer)));
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                        Scheduler::Create(sc, std::move(setup.cache)));
  parts.core = std::make_unique<EngineCore>(std::move(scheduler), parts.executor.get());
  parts.plan = setup.plan;
  // The CPU model cache keeps rings and compressor states per runner slot
  // (not in the planned pages): report them next to the page plan.
  const std::string model_cache =
      fmt::format("model cache: {} slots, {:.1f} MiB fixed (rings, compressor states), K = {}",
                  parts.executor->num_cache_slots(),
                  static_cast<double>(parts.executor->cache_fixed_bytes()) / (1 << 20),
                  options.num_speculative_tokens);
  DSV4_LOG_INFO("{}", model_cache);
  parts.description = setup.description + "; " + model_cache;
  return parts;
}

}  // namespace dsv4
