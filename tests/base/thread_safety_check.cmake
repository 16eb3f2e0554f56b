# Proves that Clang's thread-safety analysis is on with the project's flags:
# the snippet's correct case (0) must compile, and each case that breaks one
# locking rule (1..6) must fail with a -Wthread-safety-analysis error.
#   cmake -DCXX=clang++ -DFLAGS="a|b|..." -DINCLUDE=<inc/base> -DSNIPPET=<file> -P this
# FLAGS are the project's compile flags joined with '|' (a list cannot pass
# through -D intact).
string(REPLACE "|" ";" flags "${FLAGS}")
set(base ${CXX} ${flags} -std=c++20 -fsyntax-only -I${INCLUDE} ${SNIPPET})

execute_process(COMMAND ${base} -DDSV4_CASE=0 RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the correctly locked snippet does not compile:\n${err}")
endif()

set(rules "read without the lock" "write without the lock"
          "REQUIRES function called without the lock"
          "EXCLUDES function called with the lock held"
          "condition variable waited on without the lock"
          "lock still held at return")
set(n 0)
foreach(rule IN LISTS rules)
  math(EXPR n "${n} + 1")
  execute_process(COMMAND ${base} -DDSV4_CASE=${n} RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "case ${n} (${rule}) compiled: the thread-safety analysis is off")
  endif()
  if(NOT err MATCHES "error: [^\n]*\\[-Werror,-Wthread-safety-analysis\\]")
    message(FATAL_ERROR "case ${n} (${rule}) failed, but not by the analysis:\n${err}")
  endif()
  message(STATUS "case ${n} rejected as expected: ${rule}")
endforeach()
