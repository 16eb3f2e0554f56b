# W8A8 (INT8 weight x per-token INT8 activation) kernels; paths relative to
# src/kernels.  The AVX-512 file needs VNNI, which the AVX-512 flags of
# src/kernels/CMakeLists.txt include.
set(KERNEL_INT8_SOURCES int8_gemm.cc int8_panels.cc ref/int8_gemm_ref.cc)
set(KERNEL_INT8_AVX2_SOURCES cpu/int8_gemm_avx2.cc)
set(KERNEL_INT8_AVX512_SOURCES cpu/int8_gemm_avx512.cc)
