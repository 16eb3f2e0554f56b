# text: tokenizer encode throughput (plain executable; the side-by-side run
# with the Hugging Face engine is bench/tokenizer_compare/run.sh).
add_executable(text_tokenizer_bench ${CMAKE_CURRENT_LIST_DIR}/text_tokenizer_bench.cc)
dsv4_apply_flags(text_tokenizer_bench)
target_link_libraries(text_tokenizer_bench PRIVATE dsv4_text)
