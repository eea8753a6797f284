#!/usr/bin/env python3
"""Writes tests/data/quant/: golden vectors for kvmem's quantization kernels, produced by the
`gguf` Python package (numpy re-implementations of ggml's reference code), an implementation
independent of kvmem's.

  dequant: random-ish blocks of every format kvmem dequantizes (random codes, fp16 scales drawn
           from normal, tiny, subnormal, zero and extreme values) and gguf's dequantized floats.
  quant:   float inputs (random at many magnitudes, exact rounding ties, zero and constant blocks,
           sign ties of the largest magnitude) and gguf's quantized bytes, for the formats gguf
           quantizes with ggml's reference rounding (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16).
  model:   a few rows of real tensors of SmolLM2-135M-Instruct.Q4_1.gguf (Q8_0 and Q4_1) and their
           gguf dequantization, when the model is present.

manifest.txt lists one case a line: `<kind> <type> <n_elements> <input file> <expected file>`.
Raw files are little-endian: *.bin block bytes, *.f32 float32.

Run with the project venv (numpy + gguf):
  $HOME/.cache/kvmem/venv/bin/python scripts/make_quant_vectors.py
"""

import os
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, quants

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "quant"
MODEL = Path(os.environ.get("HOME", "~")) / ".cache/kvmem/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# (block elements, block bytes, byte offsets of fp16 scale fields)
LAYOUT = {
    T.Q4_0: (32, 18, [0]),
    T.Q4_1: (32, 20, [0, 2]),
    T.Q5_0: (32, 22, [0]),
    T.Q5_1: (32, 24, [0, 2]),
    T.Q8_0: (32, 34, [0]),
    T.Q2_K: (256, 84, [80, 82]),
    T.Q3_K: (256, 110, [108]),
    T.Q4_K: (256, 144, [0, 2]),
    T.Q5_K: (256, 176, [0, 2]),
    T.Q6_K: (256, 210, [208]),
}

# fp16 bit patterns worth covering: zero, -zero, smallest/largest subnormal, smallest normal,
# largest finite, one, and a negative value.
SPECIAL_HALVES = [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x3C00, 0xB800]


def random_halves(rng, n):
    """Finite fp16 scales, mostly of realistic magnitude, some special."""
    mags = 10.0 ** rng.uniform(-6, 1, size=n)
    signs = np.where(rng.random(n) < 0.25, -1.0, 1.0)
    bits = (mags * signs).astype(np.float16).view(np.uint16)
    pick = rng.random(n) < 0.2
    bits[pick] = rng.choice(SPECIAL_HALVES, size=int(pick.sum()))
    return bits


def dequant_case(rng, qtype, n_blocks):
    bs, ts, scale_offsets = LAYOUT[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    # Extreme codes: the first block has every code bit clear, the second every bit set.
    blocks[0, :] = 0x00
    blocks[1, :] = 0xFF
    for off in scale_offsets:
        halves = random_halves(rng, n_blocks)
        halves[0] = 0x3C00  # keep the extreme-code blocks' scales ordinary
        halves[1] = 0x3555
        blocks[:, off : off + 2] = halves.view(np.uint8).reshape(n_blocks, 2)
    data = blocks.reshape(-1)
    return data, quants.dequantize(data, qtype).astype(np.float32).reshape(-1)


def float_bits_case(rng, qtype, n):
    if qtype == T.F16:
        bits = rng.integers(0, 0x10000, size=n, dtype=np.uint32).astype(np.uint16)
        bits[(bits & 0x7C00) == 0x7C00] &= 0xBFFF  # no inf/NaN: clear the top exponent bit
        bits[:len(SPECIAL_HALVES)] = SPECIAL_HALVES
        data = bits.view(np.uint8)
        return data, data.view(np.float16).astype(np.float32)
    bits = rng.integers(0, 0x10000, size=n, dtype=np.uint32).astype(np.uint16)
    bits[(bits & 0x7F80) == 0x7F80] &= 0xBFFF
    data = bits.view(np.uint8)
    return data, quants.dequantize(data, T.BF16).astype(np.float32).reshape(-1)


def quant_inputs(rng, block, n_blocks):
    """Float blocks that exercise the quantizers' rounding and sign choices."""
    rows = []
    for scale in (1e-30, 1e-6, 1e-3, 1.0, 1e3, 1e30):
        rows.append(rng.standard_normal(block) * scale)
    rows.append(np.zeros(block))
    rows.append(np.full(block, 0.37))  # constant: min == max
    # With amax = 127, Q8_0's step is exactly 1: half-integers are rounding ties of both signs.
    r = np.arange(block, dtype=np.float64) - block / 2 + 0.5
    r[0] = -127.0
    rows.append(r)
    r = np.arange(block, dtype=np.float64) * 3.0 + 0.5
    r[-1] = 127.0
    rows.append(r)
    # Largest magnitude reached with both signs: the first one decides the sign of d.
    r = rng.standard_normal(block)
    r[3], r[9] = -4.0, 4.0
    rows.append(r)
    r = rng.standard_normal(block)
    r[2], r[5] = 4.0, -4.0
    rows.append(r)
    r = rng.standard_normal(block)
    r[7] = 1e4  # one outlier
    rows.append(r)
    r = np.abs(rng.standard_normal(block)) + 100.0  # all positive, offset
    rows.append(r)
    while len(rows) < n_blocks:
        rows.append(rng.standard_normal(block) * 10.0 ** rng.uniform(-3, 3))
    return np.concatenate(rows[:n_blocks]).astype(np.float32)


def write(name, arr):
    (OUT / name).write_bytes(np.ascontiguousarray(arr).tobytes())


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240611)
    lines = ["# kind type n_elements input expected  (generated by scripts/make_quant_vectors.py)"]

    for qtype, (bs, _, _) in LAYOUT.items():
        n_blocks = 24 if bs == 32 else 6
        data, expect = dequant_case(rng, qtype, n_blocks)
        stem = f"dequant_{qtype.name.lower()}"
        write(stem + ".bin", data)
        write(stem + ".f32", expect)
        lines.append(f"dequant {qtype.name} {bs * n_blocks} {stem}.bin {stem}.f32")
    # MXFP4: an E8M0 scale byte, then 16 bytes of nibbles; every scale from 0 (2^-128, a float
    # subnormal) to 255, every code (own generator, so the cases above stay as they were)
    mx = np.random.default_rng(39).integers(0, 256, size=(256, 17), dtype=np.uint8)
    mx[:, 0] = np.arange(256, dtype=np.uint8)
    mx[0, 1:], mx[1, 1:] = 0x00, 0xFF
    with np.errstate(over="ignore"):
        expect = quants.dequantize(mx.reshape(-1), T.MXFP4).astype(np.float32).reshape(-1)
    write("dequant_mxfp4.bin", mx.reshape(-1))
    write("dequant_mxfp4.f32", expect)
    lines.append(f"dequant MXFP4 {32 * 256} dequant_mxfp4.bin dequant_mxfp4.f32")
    for qtype in (T.F16, T.BF16):
        data, expect = float_bits_case(rng, qtype, 1024)
        stem = f"dequant_{qtype.name.lower()}"
        write(stem + ".bin", data)
        write(stem + ".f32", expect)
        lines.append(f"dequant {qtype.name} 1024 {stem}.bin {stem}.f32")

    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.F16, T.BF16):
        x = quant_inputs(rng, 32, 24)
        if qtype in (T.F16, T.BF16):
            x = x[np.abs(x) < 6e4] if qtype == T.F16 else x  # F16: stay below its overflow
        with np.errstate(over="ignore"):  # the 1e30 block overflows fp16 scales to inf, as in ggml
            q = quants.quantize(x.reshape(-1, 32) if qtype not in (T.F16, T.BF16) else x, qtype)
        q = np.asarray(q).view(np.uint8).reshape(-1)
        stem = f"quant_{qtype.name.lower()}"
        write(stem + "_in.f32", x)
        write(stem + ".bin", q)
        lines.append(f"quant {qtype.name} {x.size} {stem}_in.f32 {stem}.bin")

    if MODEL.exists():
        reader = GGUFReader(str(MODEL))
        tensors = {t.name: t for t in reader.tensors}
        picks = [("token_embd.weight", [0, 1, 2, 1000, 30000, 49151]),
                 ("blk.0.attn_q.weight", [0, 1, 100, 575]),
                 ("blk.3.ffn_down.weight", [0, 288])]
        for name, row_ids in picks:
            t = tensors[name]
            rows = np.asarray(t.data)[row_ids]  # (rows, row_bytes) uint8
            data = rows.reshape(-1)
            expect = quants.dequantize(data, t.tensor_type).astype(np.float32).reshape(-1)
            stem = "model_" + name.replace(".weight", "").replace(".", "_")
            write(stem + ".bin", data)
            write(stem + ".f32", expect)
            lines.append(f"model {t.tensor_type.name} {expect.size} {stem}.bin {stem}.f32")
    else:
        print(f"note: {MODEL} not found; model rows skipped", file=sys.stderr)

    (OUT / "manifest.txt").write_text("\n".join(lines) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(lines) - 1} cases, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
