# No AVX-512 code outside the AVX-512 objects (tests/kernels/check_isa_leak.py,
# docs/kernels.md "Checking that AVX-512 stays in its objects"): every layer
# library is disassembled; only the kernels' AVX-512 objects may contain EVEX
# instructions, and none of them in a weak (linker-shared) function.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND CMAKE_OBJDUMP AND CMAKE_NM)
  get_property(avx512_sources GLOBAL PROPERTY DSV4_AVX512_SOURCES)
  get_property(avx512_flags GLOBAL PROPERTY DSV4_AVX512_FLAGS)
  set(avx512_objects "")
  foreach(src ${avx512_sources})
    get_filename_component(name ${src} NAME)
    list(APPEND avx512_objects ${name}.o)
  endforeach()
  list(JOIN avx512_objects "," avx512_objects)
  set(layer_archives "")
  set(layer_targets "")
  file(GLOB layer_dirs LIST_DIRECTORIES true ${CMAKE_SOURCE_DIR}/src/*)
  foreach(dir ${layer_dirs})
    get_filename_component(layer ${dir} NAME)
    if(TARGET dsv4_${layer})
      get_target_property(type dsv4_${layer} TYPE)
      if(type STREQUAL "STATIC_LIBRARY")
        list(APPEND layer_archives $<TARGET_FILE:dsv4_${layer}>)
        list(APPEND layer_targets dsv4_${layer})
      endif()
    endif()
  endforeach()
  set(check ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_isa_leak.py
      --objdump ${CMAKE_OBJDUMP} --nm ${CMAKE_NM})
  add_test(NAME kernel_isa_leak_check COMMAND ${check} --avx512 ${avx512_objects} ${layer_archives})
  # `--target kernel_isa_leak_inputs` builds everything the three tests read.
  add_custom_target(kernel_isa_leak_inputs)

  # The check must see both kinds of leak: a fixture archive with an AVX-512
  # object exporting a weak inline function and a baseline object with a
  # target("avx512f") function.  Built with the tests, never linked anywhere.
  add_library(isa_leak_fixture STATIC isa_leak_fixture_avx512.cc isa_leak_fixture_plain.cc)
  target_compile_options(isa_leak_fixture PRIVATE -O2 -march=x86-64-v3)
  set_source_files_properties(isa_leak_fixture_avx512.cc PROPERTIES COMPILE_OPTIONS
                              "${avx512_flags}")
  add_test(NAME kernel_isa_leak_check_sees_weak_leak
           COMMAND ${check} --avx512 isa_leak_fixture_avx512.cc.o
                   $<TARGET_FILE:isa_leak_fixture>)
  add_dependencies(kernel_isa_leak_inputs ${layer_targets} isa_leak_fixture)
  set_tests_properties(kernel_isa_leak_check_sees_weak_leak PROPERTIES
                       PASS_REGULAR_EXPRESSION "weak function [^ ]*LeakySum")
  add_test(NAME kernel_isa_leak_check_sees_stray_avx512
           COMMAND ${check} --avx512 isa_leak_fixture_avx512.cc.o
                   $<TARGET_FILE:isa_leak_fixture>)
  set_tests_properties(kernel_isa_leak_check_sees_stray_avx512 PROPERTIES
                       PASS_REGULAR_EXPRESSION "isa_leak_fixture_plain.cc.o.: [^ ]*StrayWide[^ ]* has AVX-512 code")
else()
  message(STATUS "kernel_isa_leak_check: needs Python 3, objdump and nm; not registered")
endif()
