dsv4_test(NAME model_compressor_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/compressor_test.cc
  DEPS model kernels tensor base)
