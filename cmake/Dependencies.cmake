# Every third-party dependency of kvmem, in one place. All come from Debian 12 packages
# (installed by scripts/setup.sh); nothing is vendored.
#
#   package (Debian)        used by
#   libgtest-dev            tests
#   libcli11-dev            apps (command line parsing)
#   nlohmann-json3-dev      apps/eval (LoCoMo data, --json output), memory/store (manifests),
#                           serve (API bodies), tests (golden vectors)
#   libxxhash-dev           memory/store (block checksums, model fingerprints)
#   libssl-dev              memory/store (HMAC-SHA256: keyed agent directory names)
#   libcpp-httplib-dev      serve (HTTP server), scenario (HTTP client)
#   libyaml-cpp-dev         scenario (scenario files)
#   libhiredis-dev          memory/store (the Redis backend)
#   redis-server            tests (a Redis the store tests and two-server tests start)
#   pkg-config              finds xxhash, cpp-httplib and hiredis
#   python3 + venv (PyPI: numpy, gguf, tokenizers)   test oracles only, never the product
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
if(KVMEM_TESTS)
  find_package(GTest REQUIRED)
endif()
find_package(CLI11 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
