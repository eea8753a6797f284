#!/usr/bin/env python3
"""Record llama.cpp greedy-decoding goldens (test tooling only).

Writes tests/data/oracle/llamacpp_greedy.json with, for each prompt of
tests/data/oracle/prompts.json (ChatML-rendered and raw-text prompts; the
ChatML text is rendered by hand), plus two extra short prompts:
  * prompt_ids  -- llama.cpp's tokenizer, special tokens parsed, no BOS
  * greedy_ids  -- N (default 64) pure-argmax continuation ids.  We do NOT use
                   llama-cpp-python's sampler: the prompt is evaluated as one
                   batch, then each step takes argmax of the last logits row
                   and evaluates that single token (no EOS stop, no
                   repetition penalty, no temperature).
  * steps[i]    -- top-8 candidate ids and logits of the row that chose
                   greedy_ids[i], and gap = top1 - top2 logit.
  * config      -- llama-cpp-python/ggml version+commit, n_threads, n_ctx,
                   n_batch, flash_attn (off), KV type (f16), extra-bufts off
                   (AMX workaround, see tests/oracle/llamacpp_util.py).

--family gemma3 writes tests/data/oracle/llamacpp_greedy_gemma3.json instead:
the prompts of gemma3_prompts.json (Gemma chat turns and raw text, one of 772
tokens, past the 512-token sliding window) plus two extra ones, each with
<bos> prepended, for ~/.cache/kvmem/models/gemma-3-270m-q4_k_m.gguf.

Usage (venv python): scripts/make_llamacpp_goldens.py [--family smollm2|gemma3]
                     [--model M] [--n 64] [--out F.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

import llamacpp_util as U  # noqa: E402
from make_prompts import GEMMA3_MODEL, chatml, gemma_turn  # noqa: E402

TOPK = 8
N_CTX = 2048
N_THREADS = 2

EXTRA = [
    {"name": "chat_haiku", "kind": "chatml",
     "text": chatml("Write a haiku about autumn leaves.")},
    {"name": "raw_list", "kind": "raw",
     "text": "Here is a list of the planets of the solar system, in order:\n1."},
]
EXTRA_GEMMA3 = [
    {"name": "chat_haiku", "kind": "gemma",
     "text": gemma_turn("Write a haiku about autumn leaves.")},
    {"name": "raw_list", "kind": "raw",
     "text": "Here is a list of the planets of the solar system, in order:\n1."},
]


def topk(row: np.ndarray, k: int = TOPK):
    idx = np.argsort(-row, kind="stable")[:k]
    return [int(i) for i in idx], [float(row[i]) for i in idx]


def greedy(llm, prompt_ids, n):
    llm.reset()
    llm.eval(list(prompt_ids))
    row = np.array(llm.scores[len(prompt_ids) - 1], dtype=np.float32)
    ids, steps = [], []
    for _ in range(n):
        ti, tl = topk(row)
        t = ti[0]
        assert t == int(np.argmax(row))
        ids.append(t)
        steps.append({"top_ids": ti, "top_logits": [round(x, 5) for x in tl],
                      "gap": round(tl[0] - tl[1], 5)})
        llm.eval([t])
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return ids, steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=["smollm2", "gemma3"], default="smollm2")
    ap.add_argument("--model")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--prompts")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    gemma = a.family == "gemma3"
    data = os.path.join(ROOT, "tests", "data", "oracle")
    a.model = a.model or (GEMMA3_MODEL if gemma else U.model_path())
    a.prompts = a.prompts or os.path.join(data, "gemma3_prompts.json" if gemma else "prompts.json")
    a.out = a.out or os.path.join(data, "llamacpp_greedy_gemma3.json" if gemma
                                  else "llamacpp_greedy.json")
    prompts = json.load(open(a.prompts))["prompts"] + (EXTRA_GEMMA3 if gemma else EXTRA)
    # logits_all=True so that llm.scores holds every evaluated row
    llm = U.open_model(a.model, n_ctx=N_CTX, n_threads=N_THREADS,
                       logits_all=True, flash_attn=False)
    cfg = U.versions()
    cfg.update({"n_threads": N_THREADS, "n_ctx": N_CTX, "n_batch": llm.n_batch,
                "flash_attn": False, "type_k": "f16", "type_v": "f16",
                "sampling": "argmax of eval logits (no sampler), no EOS stop",
                "prompt_eval": "one llama_decode per n_batch chunk, then 1-token decodes"})
    out = {"model": os.path.basename(a.model), "n_generate": a.n, "topk": TOPK,
           "config": cfg, "cases": []}
    bos = [llm.token_bos()] if gemma else []  # Gemma's add_bos_token is true
    for p in prompts:
        ids = bos + U.tokenize(llm, p["text"])
        if "ids" in p and p["ids"] != ids:
            print(f"warning: {p['name']}: prompts.json ids differ from llama.cpp's",
                  file=sys.stderr)
        t0 = time.time()
        gen, steps = greedy(llm, ids, a.n)
        text = llm.detokenize(gen, special=True).decode("utf-8", "replace")
        gaps = [s["gap"] for s in steps]
        print(f"{p['name']:14s} prompt {len(ids):5d} tok, {time.time() - t0:5.1f}s, "
              f"min gap {min(gaps):.4f}: {text[:60]!r}")
        out["cases"].append({"name": p["name"], "kind": p["kind"], "text": p["text"],
                             "prompt_ids": ids, "greedy_ids": gen,
                             "greedy_text": text, "steps": steps})
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print("wrote", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
