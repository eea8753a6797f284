#!/usr/bin/env bash
# Builds kvmem and runs every test: unit tests of each layer, the oracle comparisons against
# independent implementations (numpy reference forward pass, Hugging Face tokenizers vectors,
# llama.cpp greedy goldens), the server end to end (official openai/anthropic clients, restarts,
# crashes), then the unit tests again under ASan+UBSan.
#   scripts/test.sh            everything (CI runs this)
#   scripts/test.sh --quick    release build only, no sanitizer pass
#   scripts/test.sh --long     release build, then the long tests only (tests/long/: whole
#                              evaluations and a 2-minute soak, minutes each; they need Gemma-3
#                              270M, fetched here), the crash loop at 1000 kills, the thread
#                              sanitizer (scripts/tsan.sh), and beside them every libFuzzer
#                              target for FUZZ_SECONDS each (default 600)
# The default run ends with every libFuzzer target for 60 s, seed 1, one per core at a time
# (scripts/fuzz.sh, fuzz/README.md). Builds go through ccache when it is installed, keyed on paths
# relative to the checkout, so a run on a new checkout reuses what an earlier one compiled; each
# phase's time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
KVMEM_HOME="${KVMEM_HOME:-$HOME/.cache/kvmem}"
scripts/install_deps.sh >/dev/null
# The sentence encoder's real-model tests (memory_embed) and `kvmem eval locomo --methods embed`.
scripts/install_deps.sh --model minilm >/dev/null
PY="$KVMEM_HOME/venv/bin/python"
jobs="$(nproc)"
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
fi
t_start=$SECONDS
phases=()
phase() { phases+=("$(printf '%-34s %5d s' "$1" $((SECONDS - t_start)))"); t_start=$SECONDS; }

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVMEM_PYTHON="$PY" >/dev/null
cmake --build build -j"$jobs"
phase "release build"
if [ "${1:-}" = "--long" ]; then
  scripts/install_deps.sh --model gemma3-270m >/dev/null
  # Two lanes, one per core: every libFuzzer target for FUZZ_SECONDS, one after another (each
  # gets a whole core for its time), beside the long tests, the crash loop and the thread
  # sanitizer, one after another. The lanes' own phases are printed at the end.
  fuzz_log="$PWD/build/fuzz-long.log"
  (t0=$SECONDS rc=0; FUZZ_JOBS=1 scripts/fuzz.sh "${FUZZ_SECONDS:-600}" || rc=$?
   echo "fuzz lane: $((SECONDS - t0)) s"; exit $rc) >"$fuzz_log" 2>&1 &
  fuzz_pid=$!
  status=0
  (cd build && ctest --output-on-failure -V -L long) || status=1
  phase "long tests (tests/long)"
  # The crash loop of the default run (200 kills) at the issue's 1000 (docs/reliability.md).
  (cd build && KVMEM_CRASH_RUNS=1000 ctest --output-on-failure -V -R '^server_test_server_crash$' \
     --timeout 7200) || status=1
  phase "crash loop, 1000 kills"
  scripts/tsan.sh || status=1
  phase "thread sanitizer (build, tests)"
  wait "$fuzz_pid" || status=1
  cat "$fuzz_log"
  phase "fuzz lane: rest after the above"
  printf '%s\n' "${phases[@]}"
  [ $status -eq 0 ] && echo "long tests passed" || echo "long tests FAILED"
  exit $status
fi
(cd build && ctest --output-on-failure -j"$jobs" -LE long)
phase "release tests"

if [ "${1:-}" != "--quick" ]; then
  # Line tables only (-g1): enough for sanitizer reports, and the build is the long pole of CI.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVMEM_SANITIZE=ON \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DKVMEM_PYTHON="$PY" >/dev/null
  cmake --build build-asan -j"$jobs"
  phase "asan build"
  # Unit tests only: the oracle and server runs are slow under sanitizers (whole models) and
  # cover code paths the unit tests run too.
  (cd build-asan && ctest --output-on-failure -j"$jobs" -E '^(oracle|server|scripts|long)_')
  phase "asan unit tests"
  # Hostile input: each libFuzzer target for a short run over its corpus (clang build tree),
  # with a fixed seed: a finding here is one a run on a developer's machine finds too.
  FUZZ_SEED=1 scripts/fuzz.sh 60
  phase "fuzz build and 60 s per target"
fi
printf '%s\n' "${phases[@]}"
echo "all tests passed"
