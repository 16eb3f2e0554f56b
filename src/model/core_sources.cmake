# Model core (everything but attention): weight binding, mHC, MoE, blocks,
# the forward pass with MTP, per-model caches.
set(MODEL_CORE_SOURCES
  weights.cc mhc.cc moe.cc moe_shard.cc block.cc model_cache.cc model.cc expert_usage.cc)
