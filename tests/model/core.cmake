# Model core tests (MoE, blocks, whole model, golden checks, consistency).
dsv4_test(NAME model_moe_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/moe_test.cc
  DEPS model kernels checkpoint tensor base)
