# Attention sub-layer sources (paths relative to src/model).
set(MODEL_ATTENTION_SOURCES
  linear.cc attention_cache.cc compressor.cc indexer.cc attention.cc attention_forward.cc)
