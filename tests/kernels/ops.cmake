# Tests of the non-GEMM kernels (norms, RoPE, Hadamard, mHC, attention,
# indexer, MoE activation, routing and dispatch, compressor pooling): golden/ops
# vectors for every ISA, optimized-vs-reference sweeps and batch invariance.
# One binary keeps link time low.
dsv4_test(NAME kernel_ops_test
  SOURCES rmsnorm_test.cc rope_test.cc mhc_test.cc sparse_attn_test.cc indexer_test.cc
          moe_ops_test.cc ops_simd_test.cc moe_routing_test.cc
          compressor_pool_test.cc
  DEPS kernels base tensor)
# No per-call buffers in the kernels (its own binary: it replaces operator new).
dsv4_test(NAME kernel_alloc_test
  SOURCES alloc_test.cc ${CMAKE_SOURCE_DIR}/tests/testing/alloc_counter.cc
  DEPS kernels base tensor)
