# Quantization and linear-layer kernels, and the peak-rate loops of their
# instruction mixes (peak.h) (paths relative to src/kernels).
# AVX2 files build with the baseline -march=x86-64-v3; AVX-512 files get
# their ISA flags from src/kernels/CMakeLists.txt.
set(KERNEL_GEMM_SOURCES quant.cc gemm.cc gemm_driver.cc gemm_activations.cc gemm_block_scaled.cc bf16_pairs.cc fp4_panels.cc fp8_panels.cc peak.cc ref/quant_ref.cc ref/gemm_ref.cc)
set(KERNEL_GEMM_AVX2_SOURCES cpu/gemm_avx2.cc cpu/quant_avx2.cc cpu/peak_avx2.cc)
set(KERNEL_GEMM_AVX512_SOURCES cpu/gemm_avx512.cc cpu/gemm_avx512_vbmi.cc cpu/quant_avx512.cc
    cpu/fp4_records_avx512.cc
    cpu/peak_avx512.cc)
