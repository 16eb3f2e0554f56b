# Linear-layer micro-benchmarks (bench/gemm_bench.cc).
add_executable(dsv4_gemm_bench gemm_bench.cc)
dsv4_apply_flags(dsv4_gemm_bench)
target_link_libraries(dsv4_gemm_bench PRIVATE dsv4_kernels dsv4_base dsv4_tensor benchmark::benchmark)

# MoE routing / dispatch and compressor pooling (bench/moe_bench.cc).
add_executable(dsv4_moe_bench ${CMAKE_CURRENT_LIST_DIR}/moe_bench.cc)
dsv4_apply_flags(dsv4_moe_bench)
target_link_libraries(dsv4_moe_bench PRIVATE dsv4_kernels dsv4_base dsv4_tensor benchmark::benchmark)

# dsv4's prefill GEMMs next to oneDNN (bench/onednn_bench.cc), when Debian's
# libdnnl-dev is installed (scripts/deps installs it).
find_library(DSV4_DNNL_LIBRARY dnnl)
find_path(DSV4_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp)
if(DSV4_DNNL_LIBRARY AND DSV4_DNNL_INCLUDE)
  add_executable(dsv4_onednn_bench ${CMAKE_CURRENT_LIST_DIR}/onednn_bench.cc)
  dsv4_apply_flags(dsv4_onednn_bench)
  target_include_directories(dsv4_onednn_bench SYSTEM PRIVATE ${DSV4_DNNL_INCLUDE})
  target_link_libraries(dsv4_onednn_bench PRIVATE dsv4_kernels dsv4_base dsv4_tensor
                        benchmark::benchmark ${DSV4_DNNL_LIBRARY})
endif()

# The non-GEMM decode kernels (attention, indexer scores, mHC mixes) at Flash
# shapes next to the FMA peak loop (bench/ops_bench.cc).
add_executable(dsv4_ops_bench ${CMAKE_CURRENT_LIST_DIR}/ops_bench.cc)
dsv4_apply_flags(dsv4_ops_bench)
target_link_libraries(dsv4_ops_bench PRIVATE dsv4_kernels dsv4_base dsv4_tensor
                      benchmark::benchmark)

# Which AVX-512 instructions share vdpbf16ps's ports (bench/port_mix_bench.cc).
add_executable(dsv4_port_mix_bench ${CMAKE_CURRENT_LIST_DIR}/port_mix_bench.cc)
dsv4_apply_flags(dsv4_port_mix_bench)
target_link_libraries(dsv4_port_mix_bench PRIVATE dsv4_base benchmark::benchmark)
