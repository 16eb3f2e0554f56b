dsv4_test(NAME model_compressor_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/compressor_test.cc
  DEPS model kernels tensor base)
dsv4_test(NAME model_attention_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/attention_test.cc
  DEPS model checkpoint kernels tensor base)
dsv4_test(NAME model_attention_golden_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/attention_golden_test.cc
  DEPS model checkpoint kernels tensor base)
