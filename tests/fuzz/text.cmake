# text fuzz targets (included from tests/fuzz/CMakeLists.txt after
# dsv4_fuzz_target is defined).
target_compile_options(dsv4_text PRIVATE -fsanitize=fuzzer-no-link)
foreach(t text_tokenizer_fuzz text_chat_encoding_fuzz text_output_parser_fuzz)
  dsv4_fuzz_target(NAME ${t} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}.cc DEPS text)
  target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(${t} PRIVATE DSV4_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests/data")
  target_link_libraries(${t} PRIVATE nlohmann_json::nlohmann_json)
endforeach()
