#!/usr/bin/env python3
"""Record llama.cpp's logits on tiny random GGUFs of each model family (test tooling only).

Each case is a tiny file written by tests/oracle/make_tiny_gguf.py with F32 weights and one of
the features a family's real files carry (Llama 3.1's rope_freqs, Gemma 3's linear scaling on
its global layers, Qwen's YaRN, ...). llama.cpp (llama-cpp-python) evaluates the same token ids;
its logits at a few positions go to tests/data/oracle/llamacpp_tiny.json together with:
  * tensors_sha  -- a hash of the file's tensors (names, shapes, types, data), so the test can
                    tell when the generator no longer writes the file the goldens were made on
  * ref_maxabs   -- the largest |llama.cpp - numpy reference| over the stored rows (the two
                    independent implementations agree to this)
  * near_tie_rows -- MoE files: the stored rows at or after the first position where the
                    reference's router has a near-tie (margin < NEAR_TIE) in some layer: rounding
                    may pick another expert there, so they are not compared
  * config       -- llama-cpp-python version, threads, KV type (f16), flash attention off

tests/oracle/test_llamacpp_tiny.py compares kvmem with these goldens.

Usage (venv python, llama-cpp-python installed): scripts/make_llamacpp_tiny_goldens.py [--out F]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

import llamacpp_util as U  # noqa: E402
import make_tiny_gguf  # noqa: E402
import ref_model  # noqa: E402

OUT = os.path.join(ROOT, "tests", "data", "oracle", "llamacpp_tiny.json")
N_TOKENS = 97
ROWS = [0, 8, 24, 48, 72, 96]
NEAR_TIE = 0.03  # router margin (logits) under which a position counts as a near-tie
# (arch, make_tiny_gguf.write keyword arguments): plain files and each family feature.
CASES = [
    ("llama", {}),
    ("llama", {"rope_freqs": True}),   # Llama 3.1+
    ("llama", {"rope_scale": 4.0}),    # linear scaling on every layer
    ("qwen2", {}),
    ("qwen2", {"yarn": 4.0}),          # Qwen 2.5 long-context files
    ("qwen3", {}),
    ("qwen3", {"yarn": 4.0}),
    ("qwen3moe", {}),                  # 8 experts, top 2 per token
    # sinks, sliding window on the even layers, biases, clamped SwiGLU, YaRN; experts in F32
    # here (MXFP4 experts: test_forward.py against the reference's noise model)
    ("gpt-oss", {"yarn": 4.0, "experts": "F32"}),
    ("gemma3", {}),
    ("gemma3", {"rope_scale": 8.0}),   # Gemma 3 4B/12B/27B: the global layers only
]


def case_name(arch: str, kw: dict) -> str:
    return arch + "".join(f"-{k}{v if v is not True else ''}" for k, v in kw.items())


def token_ids(n: int) -> list[int]:
    rng = np.random.default_rng(n)
    return [int(x) for x in rng.integers(0, make_tiny_gguf.N_VOCAB, size=n)]


def tensors_sha(path: str) -> str:
    from gguf import GGUFReader
    h = hashlib.sha256()
    for t in GGUFReader(path).tensors:
        h.update(f"{t.name}|{list(map(int, t.shape))}|{t.tensor_type.name}|".encode())
        h.update(np.ascontiguousarray(t.data).tobytes())
    return h.hexdigest()[:16]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    import llama_cpp
    cases = []
    ids = token_ids(N_TOKENS)
    with tempfile.TemporaryDirectory() as tmp:
        for arch, kw in CASES:
            name = case_name(arch, kw)
            path = os.path.join(tmp, name + ".gguf")
            make_tiny_gguf.write(arch, path, "F32", **kw)
            llm = U.open_model(path, n_ctx=256)
            lc = U.eval_logits(llm, ids)[ROWS]
            del llm
            margins: list = []
            ref = ref_model.forward(ref_model.load(path), ids, margins=margins)[ROWS]
            # MoE: a router near-tie at a position lets rounding pick another expert there, which
            # moves that row and, through attention, the later ones; those rows are recorded
            # and not compared
            near_tie = []
            if margins:
                low = np.min(margins, axis=0)
                first = int(np.argmax(low < NEAR_TIE)) if (low < NEAR_TIE).any() else len(ids)
                near_tie = [r for r in ROWS if r >= first]
            diff = float(np.abs(lc - ref)[[i for i, r in enumerate(ROWS)
                                           if r not in near_tie]].max())
            print(f"{name:28s} max |llama.cpp - ref| {diff:.4f}"
                  f"{f' (near-tie rows {near_tie})' if near_tie else ''}", flush=True)
            cases.append({"name": name, "arch": arch, "wtype": "F32", "kwargs": kw,
                          "tensors_sha": tensors_sha(path), "ref_maxabs": round(diff, 5),
                          "near_tie_rows": near_tie,
                          "logits": [[round(float(x), 5) for x in row] for row in lc]})
    doc = {"config": {"llama_cpp_python": llama_cpp.__version__, "n_threads": 2,
                      "kv_type": "f16", "flash_attn": False},
           "ids": ids, "rows": ROWS, "cases": cases}
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
