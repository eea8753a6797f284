#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running kvmem: install what is missing, build
# (Release), and run the main job — a chat completion with the default model.
#   scripts/setup.sh [extra `kvmem run` arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
if [ $# -eq 0 ]; then
  set -- --chat -p "Write a haiku about memory." -n 64 --temp 0
fi
./build/apps/kvmem run "$@"
