#!/usr/bin/env bash
# Builds the threaded parts of kvmem with ThreadSanitizer (build tree build-tsan, GCC, -O2 -g1)
# and runs under it: the unit tests of core (the thread pool), memory (AgentRuntime, the stores
# with a redis-server of their own, the step batcher) and serve (the epoll front end, admission,
# concurrent clients), then the server tests with many concurrent clients against a TSan
# `kvmem serve`. Any report fails the run; reports are kept in build-tsan/tsan-logs/.
# scripts/tsan.supp exempts the calls Debian's uninstrumented cpp-httplib makes (the file says why).
#   scripts/tsan.sh            build, then every test above
#   scripts/tsan.sh REGEX      build, then the ctest tests matching REGEX only
# docs/reliability.md ("Thread sanitizer") has the figures and the races found.
set -euo pipefail
cd "$(dirname "$0")/.."
KVMEM_HOME="${KVMEM_HOME:-$HOME/.cache/kvmem}"
PY="$KVMEM_HOME/venv/bin/python"
tests='^(core|memory|serve)$|^server_test_server_(admission|clients|isolation|redis)$'
[ $# -gt 0 ] && tests="$1"

if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
fi
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVMEM_TSAN=ON \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DKVMEM_PYTHON="$PY" >/dev/null
cmake --build build-tsan -j"$(nproc)" --target core_tests memory_tests serve_tests kvmem

logs="$PWD/build-tsan/tsan-logs"
rm -rf "$logs" && mkdir -p "$logs"
# Each process writes its reports to tsan-logs/report.PID (a server's stderr is a temp file the
# Python tests do not always print); halt_on_error makes the first report fail its test as well.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 log_path=$logs/report \
suppressions=$PWD/scripts/tsan.supp"
export KVMEM_TIME_SCALE=5  # the server tests' bounds on wall time (server_util.py)
status=0
(cd build-tsan && ctest --output-on-failure -j1 -R "$tests") || status=1
if compgen -G "$logs/report.*" >/dev/null; then
  cat "$logs"/report.*
  status=1
fi
[ $status -eq 0 ] && echo "tsan: no reports"
exit $status
