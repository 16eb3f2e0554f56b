# Sampler tests (src/sampling): each
# parameter's effect on known distributions, seeded streams, penalties,
# logprobs, and the rejection-sampling statistical test.  Included by
# tests/runner/CMakeLists.txt.
dsv4_test(NAME runner_sampler_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cc ${CMAKE_CURRENT_LIST_DIR}/spec_verify_test.cc
  DEPS sampling)
