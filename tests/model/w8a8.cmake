# W8A8 inference: the converted tiny-a checkpoint against the native path.
dsv4_test(NAME model_w8a8_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/w8a8_test.cc
  DEPS model tools kernels checkpoint tensor base)
