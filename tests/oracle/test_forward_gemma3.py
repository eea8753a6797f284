#!/usr/bin/env python3
"""Oracle test: kvmem logits of Gemma-3 270M vs the numpy reference -- the
gemma3/* cases of test_forward.py (see there), run as their own test so that
each stays under ~2 minutes on 2 cores.  Skipped when the optional model is
not installed (scripts/install_deps.sh --model gemma3-270m)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import test_forward  # noqa: E402

if __name__ == "__main__":
    sys.exit(test_forward.main(["--only", "gemma3"] + sys.argv[1:]))
