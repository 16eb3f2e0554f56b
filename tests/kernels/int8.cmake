# W8A8 kernels: quantization vectors, SIMD-vs-scalar bit equality, batch
# invariance, for every ISA the CPU supports.
dsv4_test(NAME kernel_int8_test
  SOURCES int8_gemm_test.cc
  DEPS kernels base tensor)
