#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan, build tree build-fuzz) and runs each
# for SECONDS, one per core at a time, then prints a table: executions, exec/s, coverage
# (cov: edges, ft: features), corpus size, findings. Exits non-zero when a target found
# something; the input is in build-fuzz/findings/ (fuzz/README.md says how to replay it).
#   scripts/fuzz.sh [SECONDS] [TARGET...]    default 20 s, every target
#   FUZZ_SEED=N                              libFuzzer's -seed (default 0: a random one)
#   FUZZ_JOBS=N                              targets at once (default: the cores)
# scripts/test.sh runs it for 60 s per target with seed 1, so that CI replays the same inputs
# as a run here; scripts/test.sh --long for FUZZ_SECONDS (600) with random seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
all=(gguf_fuzz safetensors_block_fuzz manifest_fuzz api_request_fuzz gbnf_fuzz json_schema_fuzz
     scenario_fuzz)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

# Per target: the largest input (block files of the fuzz pools are ~13 KB); each target's
# dictionary is fuzz/<target without _fuzz>.dict.
declare -A max_len=([gguf_fuzz]=4096 [safetensors_block_fuzz]=32768 [manifest_fuzz]=4096
                    [api_request_fuzz]=4096 [gbnf_fuzz]=2048 [json_schema_fuzz]=2048
                    [scenario_fuzz]=4096)

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DKVMEM_FUZZ=ON -DKVMEM_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}" gguf_fuzz_seeds store_fuzz_seeds
build-fuzz/fuzz/gguf_fuzz_seeds build-fuzz/seeds/gguf_fuzz >/dev/null
build-fuzz/fuzz/store_fuzz_seeds build-fuzz/seeds/store >/dev/null
mkdir -p build-fuzz/findings build-fuzz/logs

seed_dirs() {
  case "$1" in
    gguf_fuzz) echo build-fuzz/seeds/gguf_fuzz ;;
    safetensors_block_fuzz) echo build-fuzz/seeds/store/block ;;
    manifest_fuzz) echo build-fuzz/seeds/store/manifest fuzz/corpus/manifest ;;
    *) echo "fuzz/corpus/${1%_fuzz}" ;;
  esac
}

# One target per core at a time (FUZZ_JOBS, default nproc); each libFuzzer process is single
# threaded, so a target's run is the same whether it runs alone or beside another.
run_target() {
  local t="$1" corpus="build-fuzz/corpus/$1" log="build-fuzz/logs/$1.log" status=0
  mkdir -p "$corpus"
  local args=(-max_total_time="$seconds" -max_len="${max_len[$t]}" -dict="fuzz/${t%_fuzz}.dict"
              -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -seed="${FUZZ_SEED:-0}"
              -artifact_prefix="build-fuzz/findings/$t-")
  # shellcheck disable=SC2046
  "build-fuzz/fuzz/$t" "${args[@]}" "$corpus" $(seed_dirs "$t") >"$log" 2>&1 || status=$?
  echo "$status" >"build-fuzz/logs/$t.status"
}
jobs_max="${FUZZ_JOBS:-$(nproc)}"
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  echo "== $t: ${seconds}s" >&2
  run_target "$t" &
done
wait

rows=()
failed=0
for t in "${targets[@]}"; do
  log="build-fuzz/logs/$t.log"
  status=$(cat "build-fuzz/logs/$t.status" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  units=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  findings=$(find build-fuzz/findings -name "$t-*" -type f | wc -l)
  rows+=("| $t | $seconds | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${units:-?} | $findings |")
  if [ "$status" -ne 0 ]; then
    tail -60 "$log"
    echo "fuzz: $t failed (exit $status); log $log, input in build-fuzz/findings/" >&2
    failed=1
  fi
done
echo "| target | s | executions | exec/s | coverage | corpus | findings |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit "$failed"
