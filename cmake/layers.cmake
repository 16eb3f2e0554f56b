# Layer targets with enforced include visibility.
#
# Every layer M lives in src/M and is included as "M/header.h".  Instead of
# putting src/ on the include path (which would let any layer include any
# other), each layer exports an include root ${CMAKE_BINARY_DIR}/inc/M that
# holds a single symlink M -> src/M.  Include roots propagate only along the
# declared target_link_libraries edges, so including a header of a layer that
# is not a (transitive) declared dependency is a "file not found" error.

set(DSV4_COMMON_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wcast-align -Wunused -Woverloaded-virtual
    -Wimplicit-fallthrough)

# Clang checks the locking rules written as annotations (base/mutex.h,
# base/thread_annotations.h; docs/architecture.md "Rules held by tools"): an
# access to a GUARDED_BY member without its mutex, a call of a REQUIRES
# function without the lock or of an EXCLUDES one with it is a warning, and
# with DSV4_WERROR an error.  The clang presets (asan, tsan, fuzz) build
# with it; GCC has no such analysis and the macros expand to nothing there.
# tests/base/thread_safety_check.cmake compiles with these flags to prove the
# analysis is on.
set(DSV4_THREAD_SAFETY_WARNINGS -Wthread-safety -Wthread-safety-beta)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND DSV4_COMMON_WARNINGS ${DSV4_THREAD_SAFETY_WARNINGS})
endif()

# Project-wide numeric contract: no FMA contraction behind our back; kernels
# that want FMA use intrinsics explicitly so the reduction order is ours.
set(DSV4_COMMON_FLAGS -ffp-contract=off -fno-math-errno -march=x86-64-v3)

function(dsv4_apply_flags target)
  target_compile_options(${target} PRIVATE ${DSV4_COMMON_FLAGS} ${DSV4_COMMON_WARNINGS})
  if(DSV4_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# dsv4_layer(NAME <module> SOURCES <files...> DEPS <dsv4 modules...> LIBS <external targets...>)
function(dsv4_layer)
  cmake_parse_arguments(L "" "NAME" "SOURCES;DEPS;LIBS" ${ARGN})
  set(root ${CMAKE_BINARY_DIR}/inc/${L_NAME})
  file(MAKE_DIRECTORY ${root})
  if(NOT EXISTS ${root}/${L_NAME})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${L_NAME} ${root}/${L_NAME} SYMBOLIC)
  endif()
  set(target dsv4_${L_NAME})
  if(L_SOURCES)
    add_library(${target} STATIC ${L_SOURCES})
    target_include_directories(${target} PUBLIC ${root})
    dsv4_apply_flags(${target})
    set(scope PUBLIC)
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${root})
    set(scope INTERFACE)
  endif()
  foreach(dep ${L_DEPS})
    target_link_libraries(${target} ${scope} dsv4_${dep})
  endforeach()
  if(L_LIBS)
    target_link_libraries(${target} ${scope} ${L_LIBS})
  endif()
endfunction()

# dsv4_test(NAME <name> SOURCES <files...> DEPS <modules...> [LIBS ...] [LABELS ...])
function(dsv4_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;DEPS;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  dsv4_apply_flags(${T_NAME})
  foreach(dep ${T_DEPS})
    target_link_libraries(${T_NAME} PRIVATE dsv4_${dep})
  endforeach()
  target_link_libraries(${T_NAME} PRIVATE dsv4_testing GTest::gmock GTest::gtest_main ${T_LIBS})
  target_compile_definitions(${T_NAME} PRIVATE
      DSV4_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests/data"
      DSV4_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
      DSV4_BINARY_DIR="${CMAKE_BINARY_DIR}")
  # Every case carries its executable's name as a label, so a configuration
  # that builds only some test targets (scripts/sanitize) can run exactly those.
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 120
                       PROPERTIES LABELS "${T_NAME};${T_LABELS}")
endfunction()
