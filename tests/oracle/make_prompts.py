#!/usr/bin/env python3
"""Regenerate tests/data/oracle/prompts.json (SmolLM2) or
tests/data/oracle/gemma3_prompts.json (test tooling only).

Token ids come from a HF `tokenizers` BPE built from the GGUF's own
vocab/merges (gguf_tokenizer.py; Gemma-3: transformers' GGUF converter);
when llama-cpp-python is importable they are cross-checked against
llama.cpp's tokenizer (special tokens parsed, no BOS) and the check result is
recorded.  SmolLM2's prompts carry no BOS (add_bos_token is false); Gemma-3's
start with <bos> (add_bos_token is true and the model needs it).

Usage: make_prompts.py [--family smollm2|gemma3] [--model M.gguf] [--out F.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import gguf_tokenizer  # noqa: E402

LOCOMO = "/work/shared/data/locomo/conv-26.json"
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user: str, system: str = SYSTEM) -> str:
    return (f"<|im_start|>system\n{system}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def gemma_turn(user: str) -> str:
    """Gemma's chat format (the <bos> is added as an id)."""
    return f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"


GEMMA3_MODEL = os.path.expanduser("~/.cache/kvmem/models/gemma-3-270m-q4_k_m.gguf")
SMOLLM2_MODEL = os.path.expanduser("~/.cache/kvmem/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def locomo_dialogue(tok, min_tokens: int = 1050, wrap=None) -> str:
    d = json.load(open(LOCOMO))
    lines = []
    n = 1
    while f"session_{n}" in d:
        lines.append(f"[{d[f'session_{n}_date_time']}]")
        for t in d[f"session_{n}"]:
            txt = t["text"]
            if "blip_caption" in t:
                txt += f" [shares a photo: {t['blip_caption']}]"
            lines.append(f"{t['speaker']}: {txt}")
            body = "\n".join(lines)
            if len(gguf_tokenizer.encode(tok, (wrap or chatml)(body))) >= min_tokens:
                return body
        n += 1
    return "\n".join(lines)


RAW_PROSE = ("The history of the printing press begins in the fifteenth "
             "century, when Johannes Gutenberg combined movable metal type, "
             "oil-based inks and a wooden screw press into a practical "
             "system. Within fifty years, presses had spread to more than "
             "two hundred cities across Europe, and the cost of books fell "
             "dramatically. Historians often argue that")
CODE_NUMBERS = ("def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n"
                "        a, b = b, a + b\n    return a\n\n"
                "# fibonacci(10) == 55, fibonacci(20) == 6765\n"
                "print([fibonacci(i) for i in range(12)])\n")


def build_texts(tok) -> list[dict]:
    dia = locomo_dialogue(tok)
    return [
        {"name": "chat_capital", "kind": "chatml",
         "text": chatml("What is the capital of France?")},
        {"name": "raw_prose", "kind": "raw", "text": RAW_PROSE},
        {"name": "code_numbers", "kind": "raw", "text": CODE_NUMBERS},
        {"name": "chat_explain", "kind": "chatml",
         "text": chatml("Explain in two sentences why the sky is blue.")},
        {"name": "locomo_1k", "kind": "chatml",
         "text": chatml("Here is a conversation between two friends.\n\n" + dia +
                        "\n\nQuestion: What did Caroline say about the support "
                        "group she went to? Answer briefly.")},
    ]


def build_gemma3_texts(tok) -> list[dict]:
    """Gemma-3 prompts: chat and raw text, and one longer than the 512-token
    sliding window of the local layers (~700 tokens), so that rows fall out
    of the window while the global layers still read them."""
    dia = locomo_dialogue(tok, min_tokens=700, wrap=gemma_turn)
    return [
        {"name": "chat_capital", "kind": "gemma",
         "text": gemma_turn("What is the capital of France?")},
        {"name": "raw_prose", "kind": "raw", "text": RAW_PROSE},
        {"name": "code_numbers", "kind": "raw", "text": CODE_NUMBERS},
        {"name": "raw_capital", "kind": "raw", "text": "The capital of France is"},
        {"name": "locomo_700", "kind": "gemma",
         "text": gemma_turn("Here is a conversation between two friends.\n\n" + dia +
                            "\n\nQuestion: What did Caroline say about the support "
                            "group she went to? Answer briefly.")},
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=["smollm2", "gemma3"], default="smollm2")
    ap.add_argument("--model")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    gemma = a.family == "gemma3"
    if a.model is None:
        a.model = GEMMA3_MODEL if gemma else os.environ.get("KVMEM_MODEL", SMOLLM2_MODEL)
    if a.out is None:
        a.out = os.path.join(ROOT, "tests", "data", "oracle",
                             "gemma3_prompts.json" if gemma else "prompts.json")
    tok = gguf_tokenizer.from_gguf(a.model)
    prompts = build_gemma3_texts(tok) if gemma else build_texts(tok)
    bos = [2] if gemma else []
    for p in prompts:
        p["ids"] = bos + gguf_tokenizer.encode(tok, p["text"])
    checked = None
    try:
        import llamacpp_util as U
        llm = U.open_model(a.model, logits_all=False)
        checked = True
        for p in prompts:
            lid = bos + U.tokenize(llm, p["text"])
            if lid != p["ids"]:
                checked = False
                print(f"MISMATCH {p['name']}: hf={len(p['ids'])} llama={len(lid)}",
                      file=sys.stderr)
                p["ids_llamacpp"] = lid
    except ImportError:
        pass
    out = {"model": os.path.basename(a.model),
           "tokenizer": ("transformers' GGUF tokenizer converter (tests/oracle/"
                         "gguf_tokenizer.py), <bos> id prepended, specials parsed" if gemma else
                         "HF tokenizers BPE built from GGUF vocab/merges "
                         "(tests/oracle/gguf_tokenizer.py), no BOS, specials parsed"),
           "llamacpp_tokenizer_agrees": checked,
           "prompts": prompts}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    for p in prompts:
        print(f"{p['name']:14s} {len(p['ids']):5d} tokens")
    print("llama.cpp tokenizer agrees:", checked)
    return 0 if checked in (True, None) else 1


if __name__ == "__main__":
    sys.exit(main())
