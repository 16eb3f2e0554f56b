# Linear-layer micro-benchmarks (bench/gemm_bench.cc).
add_executable(dsv4_gemm_bench gemm_bench.cc)
dsv4_apply_flags(dsv4_gemm_bench)
target_link_libraries(dsv4_gemm_bench PRIVATE dsv4_kernels dsv4_base dsv4_tensor benchmark::benchmark)

# MoE routing / dispatch and compressor pooling (bench/moe_bench.cc).
add_executable(dsv4_moe_bench ${CMAKE_CURRENT_LIST_DIR}/moe_bench.cc)
dsv4_apply_flags(dsv4_moe_bench)
target_link_libraries(dsv4_moe_bench PRIVATE dsv4_kernels dsv4_base dsv4_tensor benchmark::benchmark)
