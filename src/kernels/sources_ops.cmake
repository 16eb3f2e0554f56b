# Non-GEMM kernels (norms, RoPE, Hadamard, mHC, attention, indexer, MoE
# activation, routing and dispatch, compressor pooling).  Paths are relative to
# src/kernels.
set(KERNEL_OPS_SOURCES
  norm.cc rope.cc hadamard.cc mhc.cc attention.cc indexer.cc moe.cc moe_routing.cc compressor.cc
  ref/norm_ref.cc ref/rope_ref.cc ref/hadamard_ref.cc ref/mhc_ref.cc
  ref/attention_ref.cc ref/indexer_ref.cc ref/moe_ref.cc ref/moe_routing_ref.cc
  ref/compressor_ref.cc)
set(KERNEL_OPS_AVX2_SOURCES cpu/ops_avx2.cc cpu/ops_table.cc)
set(KERNEL_OPS_AVX512_SOURCES cpu/ops_avx512.cc)
