#!/bin/sh
# The measured loss of each KV storage format (docs/kvquant_results.md): perplexity and
# KL(P_f16 || P_format) of next-token distributions on LoCoMo dialogue, 2K and 8K contexts, with
# the default model (SmolLM2-135M-Instruct Q4_1).
#
#   bench/kvquant.sh                 # table on stdout, progress on stderr
#   bench/kvquant.sh --json          # one JSON object per (format, context)
#
# BUILD (default build/) is the build directory; THREADS (default 2) the thread count. Data:
# $KVMEM_DATA/locomo, else ../shared/data/locomo next to the repository, else pass --data DIR.
set -eu
cd "$(dirname "$0")/.."
build=${BUILD:-build}
cmake --build "$build" --target kvmem >/dev/null
exec "$build/apps/kvmem" eval kvquant --ctx 2048,8192 --formats q8_0,q4_0,kivi4,q8_0:q4_0 \
  --threads "${THREADS:-2}" "$@"
