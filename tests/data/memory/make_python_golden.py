"""Writes python_written.safetensors with Hugging Face's `safetensors` (an independent writer) for
tests/memory/safetensors_test.cpp. Regenerate: ~/.cache/kvmem/venv/bin/python make_python_golden.py
"""
import os

import numpy as np
from safetensors.numpy import save_file

tensors = {
    "u8": np.arange(10, dtype=np.uint8),
    "u16": np.array([0, 1, 65535], dtype=np.uint16),
    "f16": (np.arange(6, dtype=np.float16) / 2).reshape(2, 3),
    "i64": np.array([-1, 2**40, 7], dtype=np.int64),
    "empty": np.zeros((0, 4), dtype=np.float32),
    "flags": np.array([True, False], dtype=np.bool_),
}
save_file(tensors, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "python_written.safetensors"),
          metadata={"format": "np", "note": "caf\u00e9 \u2603"})
