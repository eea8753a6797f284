#!/usr/bin/env python3
"""Write tiny random-weight GGUF models for oracle tests (test tooling only).

    make_tiny_gguf.py --arch {llama,qwen2,qwen3,gemma3} --out PATH.gguf
                      [--wtype mixed|mixed-k|F32|F16|BF16|Q8_0|Q4_0|Q4_1|Q5_0|Q5_1|Q4_K|Q5_K|Q6_K]
                      [--dim 64|256] [--seed N] [--tied|--untied]
                      [--window W] [--swa-base B] [--softcap C] [--chat-template FILE]

Shapes (dim 64, the default):
  llama : 3 layers, 4 heads, 2 kv heads, head_dim 16, ffn 128, rope 1e4,
          rms eps 1e-5, tied output (no output.weight)
  qwen2 : 2 layers, 4 heads, 2 kv heads, head_dim 16, ffn 128, rope 1e6,
          rms eps 1e-2, Q/K/V biases (F32), untied output.weight
  qwen3 : 2 layers, 4 heads, 2 kv heads, key_length 32 (!= dim/heads = 16),
          ffn 128, rope 1e6, rms eps 5e-3, attn_q_norm/attn_k_norm (F32),
          tied output
  gemma3: 7 layers (0-4 and 6 local, 5 global), 4 heads, 1 kv head,
          key_length 32, ffn 128, rope 1e6 (local layers: 1e4, or
          rope.freq_base_swa with --swa-base), rms eps 1e-3, sliding window 8
          (--window), QK-norm, post_attention_norm / post_ffw_norm, tied
          output; --softcap writes final_logit_softcapping
--dim 256 (needed for K-quants, whose rows must be multiples of 256):
  ffn 512, 4 heads, 2 kv heads, head_dim 64 (qwen3 key_length 64 too, so
  n_head*head_dim = 256 rows for attn_output's K-quant blocks; gemma3 keeps
  7 layers and 1 kv head).

Vocabulary: 256 GPT-2 byte-level tokens (ids 0..255, in byte order), then 2
merged tokens ("Ġt", "he") and 3 control tokens <|endoftext|>,
<|im_start|>, <|im_end|> -> n_vocab = 261 (deliberately not a multiple of
8/32 so output-matmul tail handling is exercised).  tokenizer.ggml.model
= "gpt2", pre = "default", merges ["Ġ t", "h e"], bos = 259, eos = 260.

Weight types: norms (and biases) are always F32.  --wtype X puts every
matrix (incl. token_embd / output) in type X.  --wtype mixed cycles the
matrices through F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 (token_embd Q8_0);
mixed-k (dim 256 only) cycles through Q4_K/Q5_K/Q6_K/Q8_0/Q4_0/F16.
Non-K types are quantized with gguf.quants.quantize.  gguf cannot quantize
K-quants, so those blocks are random valid bytes with the fp16 super-block
scales (d, dmin) set so that the dequantized weights have the target std;
gguf.quants.dequantize of the stored bytes defines the oracle weights.

Determinism: numpy Generator(PCG64(seed)); seed defaults to a fixed value
derived from (arch, wtype, dim).
"""
from __future__ import annotations

import argparse
import os
import sys
import zlib

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter

NONK_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]
K_TYPES = ["Q4_K", "Q5_K", "Q6_K"]
MIXED = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]
MIXED_K = ["Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q4_0", "F16"]
ALL_WTYPES = ["mixed", "mixed-k"] + NONK_TYPES + K_TYPES

# K-quant block layout: type_size, offsets of fp16 d / dmin, dmin/d ratio
# chosen so the dequantized weights are roughly zero-mean.
_KINFO = {
    "Q2_K": (84, 80, 82, 1.5),
    "Q3_K": (110, 108, None, 0.0),
    "Q4_K": (144, 0, 2, 7.5),
    "Q5_K": (176, 0, 2, 15.5),
    "Q6_K": (210, 208, None, 0.0),
}


def bytes_to_unicode() -> dict[int, str]:
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def vocab():
    b2u = bytes_to_unicode()
    toks = [b2u[b] for b in range(256)] + ["Ġt", "he",
                                           "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * 258 + [3, 3, 3]
    merges = ["Ġ t", "h e"]
    return toks, types, merges


N_VOCAB = 261
BOS_ID, EOS_ID = 259, 260


YARN_ORIG_CTX = 256
# Router weights' spread (times 1/sqrt(n_embd)): wide, so that the chosen experts' logits stand
# apart from the rest and float rounding rarely flips a choice between implementations (a flip
# moves that token's output, and through attention the next ones', far more than rounding
# does); wider still would amplify rounding through GPT-OSS's softmax over the chosen logits.
ROUTER_STD = 15.0


def config(arch: str, dim: int) -> dict:
    if dim == 64:
        c = dict(n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128,
                 n_layer=3 if arch == "llama" else 2)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            c["head_dim"] = 32
    elif dim == 256:
        c = dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=2)
    else:
        raise ValueError("dim must be 64 or 256")
    if arch == "gemma3":
        # enough layers for the 5-local / 1-global pattern, MQA like Gemma-3 270M
        c.update(n_layer=7, n_head_kv=1, window=8)
    if arch == "qwen3moe":  # 8 experts, 2 per token, each half as wide as the dense FFN
        c.update(n_expert=8, n_expert_used=2, n_ff_exp=c["n_ff"] // 2)
    if arch == "gpt-oss":  # 4 layers (sliding window 8 on the even ones), 8 experts, 2 per token
        c.update(n_layer=4, window=8, n_expert=8, n_expert_used=2, n_ff_exp=c["n_ff"] // 2)
    c["rope_base"] = {"llama": 10000.0, "gpt-oss": 150000.0}.get(arch, 1000000.0)
    # unusually large eps for qwen2/qwen3 so an engine that ignores the
    # metadata value (hard-codes 1e-5/1e-6) is detectable above Q8 noise
    c["eps"] = {"llama": 1e-5, "qwen2": 1e-2, "qwen3": 5e-3, "qwen3moe": 5e-3,
                "gemma3": 1e-3, "gpt-oss": 1e-5}[arch]
    c["tied"] = arch in ("llama", "qwen3", "qwen3moe", "gemma3")
    c["ctx"] = 2048
    return c


def _kquant_random(rng, n_out: int, n_in: int, qname: str, std: float) -> np.ndarray:
    ts, doff, moff, ratio = _KINFO[qname]
    qt = QT[qname]
    assert n_in % 256 == 0, "K-quants need rows that are multiples of 256"
    nb = n_in // 256
    raw = rng.integers(0, 256, size=(n_out * nb, ts), dtype=np.uint8)

    def set_scales(d):
        d16 = d.astype(np.float16)
        raw[:, doff:doff + 2] = d16.view(np.uint8).reshape(-1, 2)
        if moff is not None:
            m16 = (d * ratio).astype(np.float16)
            raw[:, moff:moff + 2] = m16.view(np.uint8).reshape(-1, 2)

    d = rng.uniform(0.5, 1.5, size=n_out * nb).astype(np.float32) * 1e-3
    set_scales(d)
    w = gguf.quants.dequantize(raw.reshape(n_out, nb * ts), qt)
    cur = float(np.std(w))
    set_scales(d * (std / cur))
    out = raw.reshape(n_out, nb * ts)
    w = gguf.quants.dequantize(out, qt)
    assert np.isfinite(w).all() and 0.5 * std < np.std(w) < 2 * std, (qname, np.std(w))
    return out


def make_matrix(rng, n_out: int, n_in: int, qname: str, std: float):
    """Returns (data, raw_dtype) ready for GGUFWriter.add_tensor."""
    if qname in _KINFO:
        return _kquant_random(rng, n_out, n_in, qname, std), QT[qname]
    w = (rng.standard_normal((n_out, n_in)) * std).astype(np.float32)
    if qname == "F32":
        return w, None
    if qname == "F16":
        return w.astype(np.float16), None
    q = gguf.quants.quantize(w, QT[qname])
    return q, QT[qname]


ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "gpt-oss")


def llama3_rope_factors(n_rot: int, base: float, factor: float = 8.0, low: float = 1.0,
                       high: float = 4.0, orig_ctx: int = 64) -> np.ndarray:
    """Llama 3.1's rope_freqs (transformers' _compute_llama3_parameters, llama.cpp's converter):
    pairs whose wavelength is above orig_ctx / low are slowed by `factor`, those below
    orig_ctx / high kept, those between blended. orig_ctx is cut from 8192 to 64 so that a
    97-token test reads every kind of pair."""
    freqs = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    wavelen = 2 * np.pi / freqs
    smooth = (orig_ctx / wavelen - low) / (high - low)
    out = np.where(wavelen < orig_ctx / high, 1.0,
                   np.where(wavelen > orig_ctx / low, factor,
                            1.0 / ((1 - smooth) / factor + smooth)))
    return out.astype(np.float32)


def write(arch: str, out: str, wtype: str = "mixed", dim: int | None = None,
          seed: int | None = None, tied: bool | None = None, window: int | None = None,
          swa_base: float | None = None, softcap: float | None = None,
          rope_freqs: bool = False, rope_scale: float | None = None,
          yarn: float | None = None, experts: str = "MXFP4",
          chat_template: str | None = None) -> str:
    if arch not in ARCHS:
        raise ValueError(arch)
    if dim is None:
        dim = 256 if (wtype in K_TYPES or wtype == "mixed-k") else 64
    if (wtype in K_TYPES or wtype == "mixed-k") and dim % 256:
        raise ValueError("K-quant weights need --dim 256")
    c = config(arch, dim)
    if tied is not None:
        c["tied"] = tied
    if window is not None:
        c["window"] = window
    if seed is None:
        seed = zlib.crc32(f"{arch}/{wtype}/{dim}".encode()) & 0x7FFFFFFF
    rng = np.random.Generator(np.random.PCG64(seed))
    D, H, Hkv, hd, F = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["n_ff"]

    cycle = MIXED if wtype == "mixed" else MIXED_K if wtype == "mixed-k" else [wtype]
    ci = [0]

    def next_type():
        t = cycle[ci[0] % len(cycle)]
        ci[0] += 1
        return t

    w = GGUFWriter(out, arch)
    w.add_name(f"kvmem-tiny-{arch}-{wtype}-d{dim}")
    w.add_context_length(c["ctx"])
    w.add_embedding_length(D)
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    if arch in ("qwen3", "qwen3moe", "gemma3") or hd != D // H:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(c["rope_base"])
    if rope_scale is not None:  # linear scaling, as Gemma 3 4B/12B/27B carry it (factor 8)
        w.add_string(f"{arch}.rope.scaling.type", "linear")
        w.add_float32(f"{arch}.rope.scaling.factor", rope_scale)
    if yarn is not None:  # YaRN, as Qwen 2.5 long-context files and GPT-OSS carry it
        w.add_string(f"{arch}.rope.scaling.type", "yarn")
        w.add_float32(f"{arch}.rope.scaling.factor", yarn)
        # a short original context puts the ramp between extrapolated and interpolated pairs
        # inside the tiny head sizes
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", YARN_ORIG_CTX)
    w.add_layer_norm_rms_eps(c["eps"])
    if arch == "gpt-oss":
        w.add_sliding_window(c["window"])
    if arch in ("qwen3moe", "gpt-oss"):
        w.add_expert_count(c["n_expert"])
        w.add_expert_used_count(c["n_expert_used"])
        w.add_expert_feed_forward_length(c["n_ff_exp"])
    if arch == "gemma3":
        w.add_sliding_window(c["window"])
        if swa_base is not None:
            w.add_float32(f"{arch}.rope.freq_base_swa", swa_base)
        if softcap is not None:
            w.add_float32(f"{arch}.final_logit_softcapping", softcap)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(0)  # informational only
    toks, types, merges = vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.add_uint32("kvmem.test.seed", int(seed))
    w.add_string("kvmem.test.wtype", wtype)

    def add_mat(name, n_out, n_in, std, qname=None):
        qname = qname or next_type()
        data, raw = make_matrix(rng, n_out, n_in, qname, std)
        w.add_tensor(name, data, raw_dtype=raw)

    def add_experts(name, n_out, n_in, std, qname=None):  # [n_in, n_out, n_expert], one type
        qname = qname or next_type()
        mats = [make_matrix(rng, n_out, n_in, qname, std) for _ in range(c["n_expert"])]
        w.add_tensor(name, np.stack([d for d, _ in mats]), raw_dtype=mats[0][1])

    def add_vec(name, n, mean, std):
        w.add_tensor(name, (mean + std * rng.standard_normal(n)).astype(np.float32))

    emb_type = {"mixed": "Q8_0", "mixed-k": "Q6_K"}.get(wtype, wtype)
    emb_std = 2.0 / np.sqrt(D)   # logits std ~ 2 when tied
    add_mat("token_embd.weight", N_VOCAB, D, emb_std, emb_type)
    add_vec("output_norm.weight", D, 1.0, 0.1)
    if rope_freqs:  # Llama 3.1+: per-pair frequency factors, one tensor for every layer
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(hd, c["rope_base"]))
    if not c["tied"]:
        add_mat("output.weight", N_VOCAB, D, 2.0 / np.sqrt(D),
                {"mixed": "Q4_0", "mixed-k": "Q4_K"}.get(wtype, wtype))
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        add_vec(p + "attn_norm.weight", D, 1.0, 0.1)
        add_mat(p + "attn_q.weight", H * hd, D, 1.0 / np.sqrt(D))
        add_mat(p + "attn_k.weight", Hkv * hd, D, 1.0 / np.sqrt(D))
        add_mat(p + "attn_v.weight", Hkv * hd, D, 1.0 / np.sqrt(D))
        add_mat(p + "attn_output.weight", D, H * hd, 0.5 / np.sqrt(H * hd))
        if arch in ("qwen2", "gpt-oss"):
            add_vec(p + "attn_q.bias", H * hd, 0.0, 0.2)
            add_vec(p + "attn_k.bias", Hkv * hd, 0.0, 0.2)
            add_vec(p + "attn_v.bias", Hkv * hd, 0.0, 0.2)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            add_vec(p + "attn_q_norm.weight", hd, 1.0, 0.2)
            add_vec(p + "attn_k_norm.weight", hd, 1.0, 0.2)
        if arch == "gemma3":
            add_vec(p + "post_attention_norm.weight", D, 0.5, 0.1)
        if arch == "gpt-oss":
            add_vec(p + "attn_output.bias", D, 0.0, 0.1)
            add_vec(p + "attn_sinks.weight", H, 1.0, 1.0)
            add_vec(p + "post_attention_norm.weight", D, 1.0, 0.1)  # the FFN's norm
            E, Fe = c["n_expert"], c["n_ff_exp"]
            add_mat(p + "ffn_gate_inp.weight", E, D, ROUTER_STD / np.sqrt(D), "F32")
            add_vec(p + "ffn_gate_inp.bias", E, 0.0, 0.5)
            # the released files store the experts in MXFP4 whatever the other weights are
            add_experts(p + "ffn_gate_exps.weight", Fe, D, 1.0 / np.sqrt(D), experts)
            add_experts(p + "ffn_up_exps.weight", Fe, D, 1.0 / np.sqrt(D), experts)
            add_experts(p + "ffn_down_exps.weight", D, Fe, 0.5 / np.sqrt(Fe), experts)
            w.add_tensor(p + "ffn_gate_exps.bias", (0.2 * rng.standard_normal((E, Fe))).astype(np.float32))
            w.add_tensor(p + "ffn_up_exps.bias", (0.2 * rng.standard_normal((E, Fe))).astype(np.float32))
            w.add_tensor(p + "ffn_down_exps.bias", (0.1 * rng.standard_normal((E, D))).astype(np.float32))
            continue
        add_vec(p + "ffn_norm.weight", D, 1.0, 0.1)
        if arch == "qwen3moe":
            # the router stays F32 (llama-quantize leaves ffn_gate_inp alone)
            add_mat(p + "ffn_gate_inp.weight", c["n_expert"], D, ROUTER_STD / np.sqrt(D), "F32")
            Fe = c["n_ff_exp"]
            add_experts(p + "ffn_gate_exps.weight", Fe, D, 1.0 / np.sqrt(D))
            add_experts(p + "ffn_up_exps.weight", Fe, D, 1.0 / np.sqrt(D))
            add_experts(p + "ffn_down_exps.weight", D, Fe, 0.5 / np.sqrt(Fe))
        else:
            add_mat(p + "ffn_gate.weight", F, D, 1.0 / np.sqrt(D))
            add_mat(p + "ffn_up.weight", F, D, 1.0 / np.sqrt(D))
            add_mat(p + "ffn_down.weight", D, F, 0.5 / np.sqrt(F))
        if arch == "gemma3":
            add_vec(p + "post_ffw_norm.weight", D, 0.5, 0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="write a tiny random GGUF")
    ap.add_argument("--arch", required=True, choices=list(ARCHS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--wtype", default="mixed", choices=ALL_WTYPES)
    ap.add_argument("--dim", type=int, choices=[64, 256])
    ap.add_argument("--seed", type=int)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--tied", dest="tied", action="store_true", default=None)
    g.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--window", type=int, help="gemma3 sliding window")
    ap.add_argument("--swa-base", type=float, help="gemma3 rope.freq_base_swa")
    ap.add_argument("--softcap", type=float, help="gemma3 final_logit_softcapping")
    ap.add_argument("--chat-template", help="a Jinja file for tokenizer.chat_template")
    a = ap.parse_args(argv)
    template = None
    if a.chat_template:
        with open(a.chat_template, encoding="utf-8") as f:
            template = f.read()
    write(a.arch, a.out, a.wtype, a.dim, a.seed, a.tied, a.window, a.swa_base, a.softcap,
          chat_template=template)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
