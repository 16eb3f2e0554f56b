# Quantization and linear-layer kernels (paths relative to src/kernels).
set(KERNEL_GEMM_SOURCES quant.cc gemm.cc ref/quant_ref.cc ref/gemm_ref.cc)
set(KERNEL_GEMM_AVX2_SOURCES)
set(KERNEL_GEMM_AVX512_SOURCES)
