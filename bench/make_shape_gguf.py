#!/usr/bin/env python3
"""Writes a synthetic GGUF with the layer shapes, weight types and vocabulary size of a real
model, cut to a few layers, with random weights: a speed benchmark's input (bench/README.md,
"Model families"), never a model to run for its output.

  gpt-oss-20b     gpt-oss  2 layers: 2880 wide, 64 query / 8 KV heads of 64, 32 experts (4 per
                  token) of 2880, MXFP4 experts, Q8_0 elsewhere, 201,088 tokens, sinks, YaRN 32
  qwen3-30b-a3b   qwen3moe 2 layers: 2048 wide, 32 / 4 heads of 128, 128 experts (8 per token)
                  of 768, Q4_K (Q6_K LM head), 151,936 tokens
  gemma3-4b       gemma3   4 layers: 2560 wide, 8 / 4 heads of 256, FFN 10,240, window 1024,
                  linear rope scaling 8, Q4_K (Q6_K embeddings), 262,144 tokens

Block scales are fixed small values and codes random bytes, so every weight is finite; the
tokenizer is byte-level BPE with filler tokens up to the vocabulary size (llama.cpp needs one).

Usage: make_shape_gguf.py NAME OUT.gguf    (venv python: numpy, gguf)
"""
from __future__ import annotations

import sys

import os

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "oracle"))
from make_tiny_gguf import bytes_to_unicode  # noqa: E402

SHAPES = {
    "gpt-oss-20b": dict(arch="gpt-oss", n_layer=2, n_embd=2880, n_head=64, n_head_kv=8,
                        head_dim=64, n_ff=2880, n_expert=32, n_expert_used=4, n_ff_exp=2880,
                        n_vocab=201088, ctx=131072, rope_base=150000.0, window=128,
                        yarn=(32.0, 4096), mat="Q8_0", experts="MXFP4", head="Q8_0"),
    "qwen3-30b-a3b": dict(arch="qwen3moe", n_layer=2, n_embd=2048, n_head=32, n_head_kv=4,
                          head_dim=128, n_ff=6144, n_expert=128, n_expert_used=8, n_ff_exp=768,
                          n_vocab=151936, ctx=40960, rope_base=1000000.0, mat="Q4_K",
                          experts="Q4_K", head="Q6_K"),
    "gemma3-4b": dict(arch="gemma3", n_layer=4, n_embd=2560, n_head=8, n_head_kv=4,
                      head_dim=256, n_ff=10240, n_vocab=262144, ctx=131072, rope_base=1000000.0,
                      window=1024, linear=8.0, mat="Q4_K", head="Q6_K"),
}

# (block elements, block bytes, [(byte offset, fp16 value)]: scale fields set to fixed values)
LAYOUT = {
    "Q8_0": (32, 34, [(0, 2e-3)]),
    "Q4_K": (256, 144, [(0, 1e-3), (2, 1e-3)]),
    "Q6_K": (256, 210, [(208, 1e-3)]),
}


def random_blocks(rng, n_rows: int, n_in: int, qname: str) -> np.ndarray:
    if qname == "MXFP4":  # scale byte e: 2^(e - 128) = 2^-8
        raw = rng.integers(0, 256, size=(n_rows * n_in // 32, 17), dtype=np.uint8)
        raw[:, 0] = 120
        return raw.reshape(n_rows, n_in // 32 * 17)
    bs, ts, scales = LAYOUT[qname]
    raw = rng.integers(0, 256, size=(n_rows * n_in // bs, ts), dtype=np.uint8)
    for off, v in scales:
        raw[:, off:off + 2] = np.full(raw.shape[0], v, dtype=np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(n_rows, n_in // bs * ts)


def write(name: str, out: str) -> None:
    c = SHAPES[name]
    a, D, H, Hkv, hd = c["arch"], c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"]
    rng = np.random.default_rng(0)
    w = GGUFWriter(out, a)
    w.add_name(f"kvmem-shape-{name}")
    w.add_context_length(c["ctx"])
    w.add_embedding_length(D)
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(c["n_ff"])
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(1e-6)
    if "window" in c:
        w.add_sliding_window(c["window"])
    if "yarn" in c:
        w.add_string(f"{a}.rope.scaling.type", "yarn")
        w.add_float32(f"{a}.rope.scaling.factor", c["yarn"][0])
        w.add_uint32(f"{a}.rope.scaling.original_context_length", c["yarn"][1])
    if "linear" in c:
        w.add_string(f"{a}.rope.scaling.type", "linear")
        w.add_float32(f"{a}.rope.scaling.factor", c["linear"])
    if "n_expert" in c:
        w.add_expert_count(c["n_expert"])
        w.add_expert_used_count(c["n_expert_used"])
        w.add_expert_feed_forward_length(c["n_ff_exp"])
    V = c["n_vocab"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    b2u = bytes_to_unicode()
    toks = [b2u[b] for b in range(256)] + ["\u0120t"] + [f"t{i}" for i in range(V - 257)]
    w.add_token_list(toks)
    w.add_token_types([1] * V)
    w.add_token_merges(["\u0120 t"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def mat(tname, n_out, n_in, qname):
        w.add_tensor(tname, random_blocks(rng, n_out, n_in, qname), raw_dtype=QT[qname])

    def experts(tname, n_out, n_in, qname):
        E = c["n_expert"]
        data = random_blocks(rng, E * n_out, n_in, qname).reshape(E, n_out, -1)
        w.add_tensor(tname, data, raw_dtype=QT[qname])

    def vec(tname, n, mean=1.0):
        w.add_tensor(tname, (mean + 0.01 * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", V, D, c["head"])
    vec("output_norm.weight", D)
    if a != "gemma3":
        mat("output.weight", V, D, c["head"])
    m = c["mat"]
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", D)
        mat(p + "attn_q.weight", H * hd, D, m)
        mat(p + "attn_k.weight", Hkv * hd, D, m)
        mat(p + "attn_v.weight", Hkv * hd, D, m)
        mat(p + "attn_output.weight", D, H * hd, m)
        if a in ("qwen3moe", "gemma3"):
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
        if a == "gemma3":
            vec(p + "post_attention_norm.weight", D)
            vec(p + "post_ffw_norm.weight", D)
        if a == "gpt-oss":
            for b, n in (("attn_q.bias", H * hd), ("attn_k.bias", Hkv * hd),
                         ("attn_v.bias", Hkv * hd), ("attn_output.bias", D)):
                vec(p + b, n, 0.0)
            vec(p + "attn_sinks.weight", H, 0.0)
            vec(p + "post_attention_norm.weight", D)
            vec(p + "ffn_gate_inp.bias", c["n_expert"], 0.0)
            for b, n in (("ffn_gate_exps.bias", c["n_ff_exp"]), ("ffn_up_exps.bias", c["n_ff_exp"]),
                         ("ffn_down_exps.bias", D)):
                w.add_tensor(p + b, np.zeros((c["n_expert"], n), dtype=np.float32))
        else:
            vec(p + "ffn_norm.weight", D)
        if "n_expert" in c:
            w.add_tensor(p + "ffn_gate_inp.weight",
                         (0.05 * rng.standard_normal((c["n_expert"], D))).astype(np.float32))
            Fe, q = c["n_ff_exp"], c["experts"]
            experts(p + "ffn_gate_exps.weight", Fe, D, q)
            experts(p + "ffn_up_exps.weight", Fe, D, q)
            experts(p + "ffn_down_exps.weight", D, Fe, q)
        else:
            mat(p + "ffn_gate.weight", c["n_ff"], D, m)
            mat(p + "ffn_up.weight", c["n_ff"], D, m)
            mat(p + "ffn_down.weight", D, c["n_ff"], m)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: make_shape_gguf.py {{{','.join(SHAPES)}}} OUT.gguf")
    write(sys.argv[1], sys.argv[2])
