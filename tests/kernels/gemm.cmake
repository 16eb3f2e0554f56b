# Quantization and linear-layer kernels: golden/ops vectors, SIMD-vs-scalar
# differential tests and batch invariance, for every ISA the CPU supports.
dsv4_test(NAME kernel_gemm_test
  SOURCES quant_test.cc gemm_test.cc gemm_batch_test.cc gemm_fp4_test.cc gemm_fp4dot_test.cc gemm_bits_test.cc peak_test.cc
  DEPS kernels base tensor)
