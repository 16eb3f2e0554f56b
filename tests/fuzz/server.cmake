# OpenAI request-parser fuzz target (included from tests/fuzz/CMakeLists.txt
# after dsv4_fuzz_target is defined).
target_compile_options(dsv4_server PRIVATE -fsanitize=fuzzer-no-link)
dsv4_fuzz_target(NAME server_request_fuzz SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_request_fuzz.cc
                 DEPS server)
target_include_directories(server_request_fuzz PRIVATE ${CMAKE_SOURCE_DIR})
target_compile_definitions(server_request_fuzz PRIVATE
                           DSV4_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests/data")
target_link_libraries(server_request_fuzz PRIVATE nlohmann_json::nlohmann_json)

# The HTTP transport against raw client bytes over loopback (malformed
# framing, limits, pipelining, decoding; properties in the source).
dsv4_fuzz_target(NAME http_transport_fuzz
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_transport_fuzz.cc DEPS server)
target_include_directories(http_transport_fuzz PRIVATE ${CMAKE_SOURCE_DIR})
target_compile_definitions(http_transport_fuzz PRIVATE
                           DSV4_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests/data")
