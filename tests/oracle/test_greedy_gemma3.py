#!/usr/bin/env python3
"""Oracle test: kvmem greedy decoding of Gemma-3 270M vs llama.cpp goldens
(tests/data/oracle/llamacpp_greedy_gemma3.json) with test_greedy.py's pass
policy (see there).  Skipped when the optional model is not installed
(scripts/install_deps.sh --model gemma3-270m)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_greedy  # noqa: E402

if __name__ == "__main__":
    sys.exit(test_greedy.main(["--models", "gemma3"] + sys.argv[1:]))
