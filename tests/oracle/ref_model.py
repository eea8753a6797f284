#!/usr/bin/env python3
"""Independent numpy reference forward pass for GGUF decoder-only LLMs.

TEST ORACLE ONLY -- not part of the product.

Supported architectures (general.architecture):
  * llama : RoPE "normal" mode. llama.cpp's HF->GGUF converter permutes the
            Q/K projection rows so that the rotated pairs are adjacent
            dims (2i, 2i+1) of each head.
  * qwen2 : Q/K/V biases, RoPE NEOX mode: pairs (i, i + n_rot/2).
  * qwen3 : per-head RMSNorm on Q and K (blk.N.attn_q_norm / attn_k_norm,
            shape head_dim) applied before RoPE, NEOX mode, no biases.
  * gemma3: QK-norm and NEOX like qwen3, plus: embeddings * sqrt(n_embd);
            RMSNorm of the attention and FFN outputs (post_attention_norm,
            post_ffw_norm) before each residual add; GeGLU FFN
            (down(gelu_tanh(gate x) * up x)); attention scale
            1/sqrt(head_dim) (n_embd/n_head for the 62-layer 27B); local
            layers (il % 6 != 5) attend only to keys at positions
            q - W < k <= q (W = attention.sliding_window) and use RoPE base
            10000 (rope.freq_base_swa if present), global layers use
            rope.freq_base; optional final_logit_softcapping.  Written from
            the Gemma-3 paper / HF modeling_gemma3 semantics; the GGUF
            converter stores the norm weights as (1 + w).
Common: GQA, pre-RMSNorm (eps from metadata), SwiGLU FFN
(down(silu(gate x) * up x)), final RMSNorm, output.weight or tied
token_embd.weight.  Optional llama3-style "rope_freqs.weight" frequency
factors are honoured.  Partial rotary (rope.dimension_count < head_dim)
rotates only the first n_rot dims of each head.

All weights are dequantized with gguf.quants.dequantize (the gguf package's
own pure-numpy implementation, independent of the C++ engine) and the whole
forward pass is computed in float64 with exact softmax / exact SiLU, i.e.
this is an "exact-math" oracle for the *quantized* weights: no activation
quantization, no F16 KV cache.

API:
    logits(gguf_path, token_ids, last_only=False, rows=None) -> np.ndarray float64
        (n_tokens, vocab) logits at every position (causal attention), or
        (1, vocab) when last_only=True, or (len(rows), vocab) for the given
        positions (large vocabularies: Gemma-3 has 262,144 tokens).
    load(gguf_path) -> Model (dequantized weights cached per path)

CLI:  ref_model.py MODEL.gguf 1,2,3 [--out logits.bin]   (writes float32)
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import gguf
from gguf import GGUFReader
from gguf.quants import dequantize

F = np.float64

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "gpt-oss")


def _field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


@dataclass
class HParams:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_rot: int
    rope_base: float
    rms_eps: float
    n_ff: int
    n_vocab: int
    neox: bool
    # Per layer: RoPE base and sliding window (0 = global attention).
    layer_rope_base: list = field(default_factory=list)
    layer_window: list = field(default_factory=list)
    # Per layer: linear rope scaling, angles times 1 / rope.scaling.factor (gemma3: global
    # layers only, as llama.cpp's rope_freq_scale_train_swa = 1).
    layer_rope_scale: list = field(default_factory=list)
    # YaRN (rope.scaling.type yarn): the original context its correction dims are computed
    # for (0: no YaRN), and per layer the factor Q and K leave RoPE with (attention_factor).
    yarn_orig_ctx: int = 0
    # qwen3moe: experts per token (softmax router, top-k, weights renormalized to sum to 1)
    n_expert_used: int = 0
    # gpt-oss: weights = softmax over the chosen logits, experts' clamped SwiGLU (swiglu_oai)
    oai_moe: bool = False
    layer_rope_mag: list = field(default_factory=list)
    embd_scale: float = 1.0
    attn_scale: float = 0.0        # 0: 1/sqrt(head_dim_k)
    post_norms: bool = False
    gelu: bool = False             # GeGLU instead of SwiGLU
    final_softcap: float = 0.0


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    ffn_norm: np.ndarray
    w_gate: np.ndarray | None = None
    w_up: np.ndarray | None = None
    w_down: np.ndarray | None = None
    # qwen3moe: router (n_expert, n_embd) and experts (n_expert, n_out, n_in) instead of w_*
    router: np.ndarray | None = None
    exp_gate: np.ndarray | None = None
    exp_up: np.ndarray | None = None
    exp_down: np.ndarray | None = None
    bq: np.ndarray | None = None
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None
    bo: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    attn_post_norm: np.ndarray | None = None
    sinks: np.ndarray | None = None                 # gpt-oss: (n_head) attention sink logits
    router_b: np.ndarray | None = None              # gpt-oss: biases of router and experts
    exp_gate_b: np.ndarray | None = None
    exp_up_b: np.ndarray | None = None
    exp_down_b: np.ndarray | None = None
    ffn_post_norm: np.ndarray | None = None
    types: dict = field(default_factory=dict)   # weight attr -> ggml type name


@dataclass
class Model:
    hp: HParams
    tok_embd: np.ndarray          # (n_vocab, n_embd)
    out_norm: np.ndarray          # (n_embd,)
    output: np.ndarray            # (n_vocab, n_embd) (may alias tok_embd)
    layers: list = field(default_factory=list)
    rope_freq_factors: np.ndarray | None = None
    tied: bool = False
    out_type: str = "F32"


def _deq(t) -> np.ndarray:
    """Dequantize a ReaderTensor to float64 with numpy shape reversed from
    ggml's ne order, i.e. (ne1, ne0) = (n_out, n_in) for matrices."""
    arr = dequantize(t.data, t.tensor_type)
    ne = [int(x) for x in t.shape]            # ggml order, ne0 first
    want = tuple(reversed(ne))
    arr = np.asarray(arr, dtype=F).reshape(want)
    return arr


_CACHE: dict = {}


def load(path: str) -> Model:
    key = os.path.abspath(path)
    if key in _CACHE:
        return _CACHE[key]
    r = GGUFReader(path)
    arch = str(_field(r, "general.architecture"))
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported arch {arch!r}")

    def kv(name, default=None):
        return _field(r, f"{arch}.{name}", default)

    n_embd = int(kv("embedding_length"))
    n_head = int(kv("attention.head_count"))
    n_head_kv = int(kv("attention.head_count_kv", n_head))
    hdk = int(kv("attention.key_length", n_embd // n_head))
    hdv = int(kv("attention.value_length", hdk))
    n_rot = int(kv("rope.dimension_count", hdk))
    rope_base = float(kv("rope.freq_base", 10000.0))
    eps = float(kv("attention.layer_norm_rms_epsilon", 1e-5))
    n_layer = int(kv("block_count"))
    n_ff = int(kv("feed_forward_length"))

    tensors = {t.name: t for t in r.tensors}
    W = lambda n: _deq(tensors[n])  # noqa: E731
    tok = W("token_embd.weight")
    n_vocab = tok.shape[0]
    assert tok.shape == (n_vocab, n_embd), tok.shape
    if "output.weight" in tensors:
        out = W("output.weight")
        tied = False
    else:
        out = tok
        tied = True
    assert out.shape == (n_vocab, n_embd), out.shape

    hp = HParams(arch=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                 n_head_kv=n_head_kv, head_dim_k=hdk, head_dim_v=hdv,
                 n_rot=n_rot, rope_base=rope_base, rms_eps=eps, n_ff=n_ff,
                 n_vocab=n_vocab,
                 neox=arch in ("qwen2", "qwen3", "qwen3moe", "gemma3", "gpt-oss"),
                 layer_rope_base=[rope_base] * n_layer, layer_window=[0] * n_layer)
    scaling = kv("rope.scaling.type", "none")
    if scaling not in ("none", "", "linear", "yarn"):
        raise NotImplementedError(f"rope scaling {scaling}")
    factor = float(kv("rope.scaling.factor", 0.0)) if scaling != "none" else 0.0
    hp.layer_rope_scale = [1.0 / factor if factor else 1.0] * n_layer
    attn_factor = float(kv("rope.scaling.attn_factor", 1.0))
    hp.layer_rope_mag = [attn_factor] * n_layer
    if scaling == "yarn":  # transformers' _compute_yarn_parameters, beta_fast 32, beta_slow 1
        if arch == "gemma3":
            raise NotImplementedError("YaRN with gemma3's unscaled local layers")
        hp.yarn_orig_ctx = int(kv("rope.scaling.original_context_length",
                                  kv("context_length")))
        mscale = 0.1 * np.log(factor) + 1.0 if factor > 1.0 else 1.0
        hp.layer_rope_mag = [attn_factor * mscale] * n_layer
    if arch == "gpt-oss":  # sliding window on the even layers (llama.cpp's swa pattern 2)
        window = int(kv("attention.sliding_window"))
        for i in range(0, n_layer, 2):
            hp.layer_window[i] = window
            hp.layer_rope_base[i] = float(kv("rope.freq_base_swa", rope_base))
        hp.oai_moe = True
    if arch == "gemma3":
        window = int(kv("attention.sliding_window"))
        local_base = float(kv("rope.freq_base_swa", 10000.0))
        for i in range(n_layer):
            if window > 0 and i % 6 != 5:
                hp.layer_window[i] = window
                hp.layer_rope_base[i] = local_base
                hp.layer_rope_scale[i] = 1.0
        hp.embd_scale = float(np.sqrt(np.float32(n_embd)))
        qpas = n_embd // n_head if n_layer == 62 else hdk
        hp.attn_scale = 1.0 / np.sqrt(qpas)
        hp.post_norms = True
        hp.gelu = True
        hp.final_softcap = float(kv("final_logit_softcapping", 0.0))
    m = Model(hp=hp, tok_embd=tok, out_norm=W("output_norm.weight"),
              output=out, tied=tied,
              out_type=tensors["token_embd.weight" if tied else "output.weight"]
              .tensor_type.name)
    if "rope_freqs.weight" in tensors:
        m.rope_freq_factors = W("rope_freqs.weight")
        assert m.rope_freq_factors.shape == (n_rot // 2,)

    opt = lambda n: W(n) if n in tensors else None  # noqa: E731
    if arch in ("qwen3moe", "gpt-oss"):
        hp.n_expert_used = int(kv("expert_used_count"))
    for i in range(n_layer):
        p = f"blk.{i}."
        L = Layer(
            attn_norm=W(p + "attn_norm.weight"),
            wq=W(p + "attn_q.weight"), wk=W(p + "attn_k.weight"),
            wv=W(p + "attn_v.weight"), wo=W(p + "attn_output.weight"),
            ffn_norm=W(p + ("post_attention_norm" if arch == "gpt-oss" else "ffn_norm")
                       + ".weight"),
            w_gate=opt(p + "ffn_gate.weight"), w_up=opt(p + "ffn_up.weight"),
            w_down=opt(p + "ffn_down.weight"),
            router=opt(p + "ffn_gate_inp.weight"), exp_gate=opt(p + "ffn_gate_exps.weight"),
            exp_up=opt(p + "ffn_up_exps.weight"), exp_down=opt(p + "ffn_down_exps.weight"),
            bq=opt(p + "attn_q.bias"), bk=opt(p + "attn_k.bias"),
            bv=opt(p + "attn_v.bias"), bo=opt(p + "attn_output.bias"),
            q_norm=opt(p + "attn_q_norm.weight"),
            k_norm=opt(p + "attn_k_norm.weight"),
            attn_post_norm=opt(p + "post_attention_norm.weight") if arch == "gemma3" else None,
            sinks=opt(p + "attn_sinks.weight"), router_b=opt(p + "ffn_gate_inp.bias"),
            exp_gate_b=opt(p + "ffn_gate_exps.bias"), exp_up_b=opt(p + "ffn_up_exps.bias"),
            exp_down_b=opt(p + "ffn_down_exps.bias"),
            ffn_post_norm=opt(p + "post_ffw_norm.weight"),
        )
        for attr, tn in (("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"),
                         ("wo", "attn_output"), ("w_gate", "ffn_gate"),
                         ("w_up", "ffn_up"), ("w_down", "ffn_down"),
                         ("router", "ffn_gate_inp"), ("exp_gate", "ffn_gate_exps"),
                         ("exp_up", "ffn_up_exps"), ("exp_down", "ffn_down_exps")):
            if p + tn + ".weight" in tensors:
                L.types[attr] = tensors[p + tn + ".weight"].tensor_type.name
        assert L.wq.shape == (n_head * hdk, n_embd), (i, L.wq.shape)
        assert L.wk.shape == (n_head_kv * hdk, n_embd), (i, L.wk.shape)
        assert L.wv.shape == (n_head_kv * hdv, n_embd), (i, L.wv.shape)
        assert L.wo.shape == (n_embd, n_head * hdv), (i, L.wo.shape)
        if L.router is not None:
            n_ff_exp = int(kv("expert_feed_forward_length"))
            assert L.exp_gate.shape[1:] == L.exp_up.shape[1:] == (n_ff_exp, n_embd)
            assert L.exp_down.shape[1:] == (n_embd, n_ff_exp)
        else:
            assert L.w_gate.shape == (n_ff, n_embd) and L.w_up.shape == (n_ff, n_embd)
            assert L.w_down.shape == (n_embd, n_ff)
        if arch == "gemma3":
            assert L.attn_post_norm is not None and L.attn_post_norm.shape == (n_embd,)
            assert L.ffn_post_norm is not None and L.ffn_post_norm.shape == (n_embd,)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            assert L.q_norm is not None and L.q_norm.shape == (hdk,)
            assert L.k_norm is not None and L.k_norm.shape == (hdk,)
        if arch == "qwen2":
            assert L.bq is not None and L.bk is not None and L.bv is not None
        m.layers.append(L)
    _CACHE[key] = m
    return m


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * w


def yarn_extrapolation(n_rot: int, base: float, orig_ctx: int) -> np.ndarray:
    """Per pair, the weight of the unscaled (extrapolated) frequency under YaRN: 1 for the fast
    pairs, 0 for the slow ones, a linear ramp between (YaRN paper, NTK-by-parts)."""
    def corr_dim(n_rotations):
        return n_rot * np.log(orig_ctx / (n_rotations * 2 * np.pi)) / (2 * np.log(base))
    low = max(np.floor(corr_dim(32.0)), 0.0)
    high = min(np.ceil(corr_dim(1.0)), n_rot - 1.0)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(n_rot // 2, dtype=F) - low) / (high - low), 0.0, 1.0)
    return 1.0 - ramp


def rope(x: np.ndarray, pos: np.ndarray, hp: HParams,
         freq_factors: np.ndarray | None, base: float | None = None,
         scale: float = 1.0, mag: float = 1.0) -> np.ndarray:
    """x: (n_heads, T, head_dim). Rotates the first n_rot dims (times mag)."""
    n_rot = hp.n_rot
    half = n_rot // 2
    base = hp.rope_base if base is None else base
    inv = base ** (-np.arange(half, dtype=F) * 2.0 / n_rot)   # theta_i
    if freq_factors is not None:
        inv = inv / freq_factors
    if hp.yarn_orig_ctx:
        e = yarn_extrapolation(n_rot, base, hp.yarn_orig_ctx)
        inv = scale * inv * (1.0 - e) + inv * e
        scale = 1.0
    ang = scale * pos.astype(F)[:, None] * inv[None, :]              # (T, half)
    c, s = mag * np.cos(ang), mag * np.sin(ang)
    y = x.copy()
    if hp.neox:
        a = x[..., :half]
        b = x[..., half:n_rot]
        y[..., :half] = a * c - b * s
        y[..., half:n_rot] = a * s + b * c
    else:
        a = x[..., 0:n_rot:2]
        b = x[..., 1:n_rot:2]
        y[..., 0:n_rot:2] = a * c - b * s
        y[..., 1:n_rot:2] = a * s + b * c
    return y


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def moe_ffn(h, L, hp, expert_mm, r32, margins=None):
    """Mixture of experts. qwen3moe (transformers' Qwen3MoeSparseMoeBlock with norm_topk_prob):
    softmax over the router's logits, each token's n_expert_used most probable experts, their
    probabilities renormalized to sum to 1, the weighted sum of their SwiGLU FFNs. gpt-oss
    (openai/gpt-oss's MLPBlock): biases on router and experts, a softmax over the chosen
    logits, the clamped SwiGLU."""
    logits = h @ L.router.T  # the router is F32 in real files: no activation rounding
    if L.router_b is not None:
        logits = logits + L.router_b
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    k = hp.n_expert_used
    f = np.zeros_like(h)
    bias = lambda b, e: 0.0 if b is None else b[e]  # noqa: E731
    if margins is not None:  # per token, the gap between the last chosen and first unchosen logit
        top = -np.sort(-logits, axis=-1)
        margins.append(top[:, k - 1] - top[:, k])
    for t in range(h.shape[0]):
        sel = np.argsort(-logits[t], kind="stable")[:k]
        if hp.oai_moe:  # softmax over the chosen logits (GPT-OSS)
            w = np.exp(logits[t, sel] - logits[t, sel].max())
            w /= w.sum()
        else:
            w = p[t, sel] / max(p[t, sel].sum(), 6.103515625e-5)
        for wj, e in zip(w, sel):
            x = h[t:t + 1]
            gate = expert_mm(x, "exp_gate", e) + bias(L.exp_gate_b, e)
            up = expert_mm(x, "exp_up", e) + bias(L.exp_up_b, e)
            g = r32(_swiglu_oai(gate, up) if hp.oai_moe else _silu(gate) * up)
            f[t] += wj * (expert_mm(g, "exp_down", e)[0] + bias(L.exp_down_b, e))
    return f


def _swiglu_oai(gate, up, alpha=1.702, limit=7.0):
    """GPT-OSS's clamped SwiGLU (openai/gpt-oss torch reference, swiglu with limit 7)."""
    g = np.minimum(gate, limit)
    u = np.clip(up, -limit, limit)
    return g / (1.0 + np.exp(-alpha * g)) * (u + 1.0)


# --------------------------------------------------------------------------
# Optional ggml-CPU *noise model* (emulate="ggml").  NOT the oracle: it only
# mimics where llama.cpp/ggml (and kvmem) round intermediate values, so that
# tolerances can be calibrated and so that the reference itself can be
# validated against llama.cpp more tightly than the rounding noise allows:
#   * activations entering a weight matmul are quantized to the weight type's
#     vec_dot type: Q8_0 (blocks of 32, fp16 scale) for Q4_0/Q5_0/Q8_0,
#     Q8_1 for Q4_1/Q5_1, Q8_K (blocks of 256, f32 scale) for K-quants,
#     F16 for F16, BF16 for BF16, none for F32;
#   * K and V cache in F16; Q rounded to F16 for KQ; softmax probs to F16 for
#     KQV (non flash-attention path); residual stream kept in float32.
# --------------------------------------------------------------------------
def _f16(x):
    return np.asarray(x).astype(np.float16).astype(F)


def _f32(x):
    return np.asarray(x).astype(np.float32).astype(F)


def _bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16          # RNE
    return u.astype(np.uint32).view(np.float32).astype(F)


def _q8_blocks(x, bs, fp16_scale):
    sh = x.shape
    b = _f32(x).reshape(-1, bs)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = _f32(amax / 127.0)
    safe = np.where(amax > 0, amax, 1.0)
    inv = np.where(amax > 0, _f32(127.0 / safe), 0.0)
    q = np.round(_f32(b * inv))
    ds = _f16(d) if fp16_scale else d
    return (q * ds).reshape(sh)


def _act_quant(x, wtype: str):
    if wtype == "F32":
        return x
    if wtype == "F16":
        return _f16(x)
    if wtype == "BF16":
        return _bf16(x)
    if wtype.endswith("_K"):
        return _q8_blocks(x, 256, fp16_scale=False)
    return _q8_blocks(x, 32, fp16_scale=True)      # Q8_0 / Q8_1


class KVCache:
    """Per-layer K/V (after RoPE) of the tokens evaluated so far."""

    def __init__(self, n_layer: int):
        self.k = [None] * n_layer      # (Hkv, n_past, dk)
        self.v = [None] * n_layer
        self.n_past = 0


def forward(m: Model, token_ids, last_only: bool = False,
            emulate: str | None = None, cache: KVCache | None = None,
            rows=None, margins: list | None = None) -> np.ndarray:
    """Logits of `token_ids` (float64, (T, vocab), or (1, vocab) if
    last_only, or (len(rows), vocab) for the batch positions `rows`).
    emulate=None: exact float64 math (the oracle).
    emulate="ggml": the rounding noise model above (calibration only).
    cache: optional KVCache; the new tokens are placed after cache.n_past
    and the cache is extended (incremental decoding).
    margins: a list that receives, for each MoE layer, every token's router margin (the gap
    between the last chosen and the first unchosen logit: below ~0.01 another implementation's
    rounding can choose another expert)."""
    hp = m.hp
    ids = np.asarray(token_ids, dtype=np.int64)
    T = ids.shape[0]
    assert T > 0 and ids.min() >= 0 and ids.max() < hp.n_vocab
    n_past = cache.n_past if cache is not None else 0
    if emulate not in (None, "ggml"):
        raise ValueError(emulate)
    em = emulate == "ggml"
    ident = lambda z: z  # noqa: E731
    kvr = _f16 if em else ident
    r32 = _f32 if em else ident

    def mm(x, L, attr):
        wt = L.types.get(attr, "F32") if em else "F32"
        return _act_quant(x, wt) @ getattr(L, attr).T

    pos = np.arange(n_past, n_past + T)
    x = m.tok_embd[ids].astype(F)                                   # (T, D)
    if hp.embd_scale != 1.0:
        x = r32(x * hp.embd_scale)
    H, Hkv, dk, dv = hp.n_head, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v
    g = H // Hkv
    scale = hp.attn_scale if hp.attn_scale else 1.0 / np.sqrt(dk)
    # causal: new query i (abs pos n_past+i) sees keys 0..n_past+i; in a
    # sliding-window layer only keys with q_pos - W < k_pos
    qpos = pos[:, None]
    kpos = np.arange(n_past + T)[None, :]
    masks = {}
    for W in set(hp.layer_window):
        vis = kpos <= qpos
        if W > 0:
            vis &= kpos > qpos - W
        masks[W] = np.where(vis, 0.0, -np.inf)
    for li, L in enumerate(m.layers):
        mask = masks[hp.layer_window[li]]
        base = hp.layer_rope_base[li]
        h = r32(rms_norm(x, L.attn_norm, hp.rms_eps))
        q = mm(h, L, "wq")
        k = mm(h, L, "wk")
        v = mm(h, L, "wv")
        if L.bq is not None:
            q = q + L.bq
        if L.bk is not None:
            k = k + L.bk
        if L.bv is not None:
            v = v + L.bv
        q = q.reshape(T, H, dk).transpose(1, 0, 2)                 # (H, T, dk)
        k = k.reshape(T, Hkv, dk).transpose(1, 0, 2)
        v = v.reshape(T, Hkv, dv).transpose(1, 0, 2)
        if L.q_norm is not None:
            q = rms_norm(q, L.q_norm, hp.rms_eps)
        if L.k_norm is not None:
            k = rms_norm(k, L.k_norm, hp.rms_eps)
        rope_scale, mag = hp.layer_rope_scale[li], hp.layer_rope_mag[li]
        q = kvr(rope(q, pos, hp, m.rope_freq_factors, base, rope_scale, mag))
        k = kvr(rope(k, pos, hp, m.rope_freq_factors, base, rope_scale, mag))
        v = kvr(v)
        if cache is not None:
            if n_past:
                k = np.concatenate([cache.k[li], k], axis=1)
                v = np.concatenate([cache.v[li], v], axis=1)
            cache.k[li], cache.v[li] = k, v
        S = n_past + T
        # GQA: query head h uses kv head h // g
        qg = q.reshape(Hkv, g * T, dk)
        s = (qg @ k.transpose(0, 2, 1)).reshape(Hkv, g, T, S) * scale
        s = s + mask
        if L.sinks is not None:  # a logit per head in the denominator, with no value row
            sk = L.sinks.reshape(Hkv, g, 1, 1)
            mx = np.maximum(s.max(axis=-1, keepdims=True), sk)
            p = np.exp(s - mx)
            p /= p.sum(axis=-1, keepdims=True) + np.exp(sk - mx)
        else:
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
        p = kvr(p)
        o = (p.reshape(Hkv, g * T, S) @ v).reshape(H, T, dv)        # (H, T, dv)
        o = o.transpose(1, 0, 2).reshape(T, H * dv)
        a = mm(r32(o), L, "wo")
        if L.bo is not None:
            a = a + L.bo
        if hp.post_norms:
            a = r32(rms_norm(r32(a), L.attn_post_norm, hp.rms_eps))
        x = r32(x + a)
        h = r32(rms_norm(x, L.ffn_norm, hp.rms_eps))
        act = _gelu_tanh if hp.gelu else _silu
        if L.router is not None:
            f = moe_ffn(h, L, hp, lambda z, a, e: _act_quant(z, L.types[a] if em else "F32")
                        @ getattr(L, a)[e].T, r32, margins)
        else:
            f = r32(act(mm(h, L, "w_gate")) * mm(h, L, "w_up"))
            f = mm(f, L, "w_down")
        if hp.post_norms:
            f = r32(rms_norm(r32(f), L.ffn_post_norm, hp.rms_eps))
        x = r32(x + f)
    if cache is not None:
        cache.n_past += T
    if last_only:
        x = x[-1:]
    elif rows is not None:
        x = x[np.asarray(rows, dtype=np.int64)]
    x = r32(rms_norm(x, m.out_norm, hp.rms_eps))
    if em:
        x = _act_quant(x, m.out_type)
    out = x @ m.output.T
    if hp.final_softcap > 0:
        out = hp.final_softcap * np.tanh(out / hp.final_softcap)
    return out


def logits(gguf_path: str, token_ids, last_only: bool = False,
           emulate: str | None = None, rows=None) -> np.ndarray:
    """(n_tokens, vocab) float64 logits at every position (causal), or at
    the positions `rows` only."""
    return forward(load(gguf_path), token_ids, last_only=last_only, emulate=emulate,
                   rows=rows)


def greedy(gguf_path: str, prompt_ids, n: int, emulate: str | None = None):
    """Pure-argmax continuation of n tokens (no EOS stop) with a KV cache.
    Returns (ids, per_step_logits_rows) where rows[i] are the logits that
    chose ids[i]."""
    m = load(gguf_path)
    c = KVCache(m.hp.n_layer)
    row = forward(m, prompt_ids, last_only=True, emulate=emulate, cache=c)[0]
    out, rows = [], []
    for _ in range(n):
        t = int(np.argmax(row))
        out.append(t)
        rows.append(row)
        row = forward(m, [t], last_only=True, emulate=emulate, cache=c)[0]
    return out, rows


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("tokens", help="comma-separated token ids")
    ap.add_argument("--out", help="write float32 (n_tokens, vocab) raw LE")
    a = ap.parse_args(argv)
    ids = [int(t) for t in a.tokens.split(",") if t.strip()]
    t0 = time.time()
    m = load(a.model)
    t1 = time.time()
    lg = forward(m, ids)
    t2 = time.time()
    print(f"arch={m.hp.arch} load={t1 - t0:.2f}s forward={t2 - t1:.2f}s "
          f"shape={lg.shape} last argmax={int(lg[-1].argmax())}",
          file=sys.stderr)
    if a.out:
        lg.astype("<f4").tofile(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
