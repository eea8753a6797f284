#!/usr/bin/env python3
"""Stand-in for the kvmem binary, used ONLY to validate the oracle test
harness itself (test_forward.py / test_greedy.py) before/independently of
the C++ engine.  Implements the same CLI contract:

  fake_kvmem.py logits -m MODEL.gguf --tokens 1,2,3 -o OUT.bin [--threads N]
      -> OUT.bin = float32 little-endian logits, shape (n_tokens, vocab), raw
  fake_kvmem.py generate-ids -m MODEL.gguf --tokens 1,2,3 -n 64 [--threads N]
      -> stdout: generated ids, comma-separated (exactly n, greedy, no EOS stop)

Backend from env FAKE_KVMEM_BACKEND:
  llama (default)  llama-cpp-python (tests/oracle/llamacpp_util.py)
  emul             ref_model with emulate="ggml" (rounding noise model)
  exact            ref_model exact float64
FAKE_KVMEM_PERTURB (emul/exact backends only) injects a deliberate bug to
check that the tests catch it: eps (rms eps x0.1), rope_base (x0.1),
rope_neox (wrong rotation pairs), no_qk_norm, no_bias, kv_bf16
(K/V rounded to bf16 instead of f16), shift (add 0.5 to every logit: must
PASS, softmax is shift invariant), noise (add N(0, 0.05*std) per logit).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _ref_model(path):
    import ref_model as R
    m = R.load(path)
    pert = os.environ.get("FAKE_KVMEM_PERTURB", "")
    if not pert or pert in ("shift", "noise", "kv_bf16"):
        return m
    m = copy.copy(m)
    m.hp = copy.copy(m.hp)
    if pert == "eps":
        m.hp.rms_eps *= 0.1
    elif pert == "rope_base":
        m.hp.rope_base *= 0.1
    elif pert == "rope_neox":
        m.hp.neox = not m.hp.neox
    elif pert in ("no_qk_norm", "no_bias"):
        m.layers = [copy.copy(L) for L in m.layers]
        for L in m.layers:
            if pert == "no_qk_norm":
                L.k_norm = None
            else:
                L.bq = None
    else:
        raise SystemExit(f"unknown perturbation {pert}")
    return m


def _ref_forward(m, ids, emulate, cache=None, last_only=False):
    import ref_model as R
    pert = os.environ.get("FAKE_KVMEM_PERTURB", "")
    if pert == "kv_bf16":
        saved = R._f16
        R._f16 = R._bf16
        try:
            out = R.forward(m, ids, last_only=last_only, emulate="ggml", cache=cache)
        finally:
            R._f16 = saved
    else:
        out = R.forward(m, ids, last_only=last_only, emulate=emulate, cache=cache)
    if pert == "shift":
        out = out + 0.5
    elif pert == "noise":
        rng = np.random.default_rng(0)
        out = out + rng.standard_normal(out.shape) * 0.05 * out.std(axis=-1, keepdims=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["logits", "generate-ids"])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("-o", "--out")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    ids = [int(t) for t in a.tokens.split(",") if t.strip()]
    backend = os.environ.get("FAKE_KVMEM_BACKEND", "llama")
    if backend == "llama":
        import llamacpp_util as U
        llm = U.open_model(a.model, n_threads=a.threads, n_ctx=4096)
        if a.cmd == "logits":
            U.eval_logits(llm, ids).astype("<f4").tofile(a.out)
            return 0
        llm.reset()
        llm.eval(ids)
        out = []
        for _ in range(a.n):
            t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            out.append(t)
            llm.eval([t])
        print(",".join(map(str, out)))
        return 0
    import ref_model as R
    emulate = "ggml" if backend == "emul" else None
    m = _ref_model(a.model)
    if a.cmd == "logits":
        _ref_forward(m, ids, emulate).astype("<f4").tofile(a.out)
        return 0
    c = R.KVCache(m.hp.n_layer)
    row = _ref_forward(m, ids, emulate, cache=c, last_only=True)[0]
    out = []
    for _ in range(a.n):
        t = int(np.argmax(row))
        out.append(t)
        row = _ref_forward(m, [t], emulate, cache=c, last_only=True)[0]
    print(",".join(map(str, out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
