# Model core tests (MoE, blocks, whole model, golden checks, consistency).
dsv4_test(NAME model_moe_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/moe_test.cc
  DEPS model kernels checkpoint tensor base)
dsv4_test(NAME model_block_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/block_test.cc
  DEPS model kernels checkpoint tensor base)
dsv4_test(NAME model_model_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/model_test.cc ${CMAKE_CURRENT_SOURCE_DIR}/weights_test.cc
  DEPS model kernels checkpoint tensor base)
dsv4_test(NAME model_consistency_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/consistency_test.cc
  DEPS model kernels checkpoint tensor base)
dsv4_test(NAME model_golden_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/golden_test.cc
  DEPS golden model kernels checkpoint tensor base)
dsv4_test(NAME model_paged_cache_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/paged_cache_test.cc
  DEPS model kernels checkpoint tensor base)
dsv4_test(NAME model_prefix_restore_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/prefix_restore_test.cc
  DEPS model kernels checkpoint tensor base)
dsv4_test(NAME model_expert_usage_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/expert_usage_test.cc
  DEPS model kernels checkpoint tensor base)
# Its own binary: it replaces the global operator new to count allocations.
dsv4_test(NAME model_alloc_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/alloc_test.cc ${CMAKE_SOURCE_DIR}/tests/testing/alloc_counter.cc
  DEPS model kernels checkpoint tensor base)
