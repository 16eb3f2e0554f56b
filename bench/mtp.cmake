# MTP: cost of a K = 1 decode step against a plain one, by part
# (bench/mtp_step_bench.cc, docs/performance.md "MTP step cost").
add_executable(dsv4_mtp_step_bench ${CMAKE_CURRENT_LIST_DIR}/mtp_step_bench.cc)
dsv4_apply_flags(dsv4_mtp_step_bench)
target_link_libraries(dsv4_mtp_step_bench PRIVATE dsv4_launch dsv4_runner dsv4_model)
