# External dependencies: Debian 12 packages only (scripts/deps installs them).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# XXH3 data checksums (base/checksum.h): sidecar and converted shards.
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
include(GoogleTest)

if(DSV4_SANITIZE)
  add_compile_options(-fsanitize=${DSV4_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${DSV4_SANITIZE})
endif()
