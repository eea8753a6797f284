#!/usr/bin/env python3
"""Plots `kvmem eval locomo --json OUT` results: answer quality against prefill tokens per
question (log scale), one point per method, MemArt's k sweeps and H2O's budget sweep joined by
lines.

    ~/.cache/kvmem/venv/bin/pip install matplotlib   # once
    ~/.cache/kvmem/venv/bin/python scripts/plot_locomo.py OUT.json [PLOT.png]

Three panels: answer NLL (lower is better; meaningful even where a small model's F1 is ~0)
against prefill tokens per question, then answer NLL and evidence recall against the KV rows
read at decode (the comparison at equal KV tokens; MemArt's prefill is the question alone
whatever k is). With `--head-report`, also PLOT_heads.png: the per-head evidence hit rates.
"""
import json
import re
import sys
from collections import defaultdict


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    src = sys.argv[1]
    dst = sys.argv[2] if len(sys.argv) == 3 else re.sub(r"\.json$", "", src) + ".png"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        sys.exit("plot_locomo: matplotlib is missing; install it with "
                 "~/.cache/kvmem/venv/bin/pip install matplotlib")
    with open(src) as f:
        data = json.load(f)
    methods = data.get("methods", {})
    if not methods:
        sys.exit(f"plot_locomo: {src} has no methods")
    # Series: a MemArt (variant, strategy, block size) over k; BM25 and embedding retrieval over
    # k; H2O over its budget ("h2o/b<B>"); full alone.
    series = defaultdict(list)
    for name, m in methods.items():
        parts = name.split("/")
        if parts[0].startswith("memart"):
            # variant/strategy/bs, k along the line; what follows k (/nbN, /turn, /q, a tag a
            # merged file adds such as /w1024) apart
            key = "/".join(parts[:3] + parts[4:])
        elif parts[0] in ("bm25", "embed", "h2o"):
            key = parts[0]
        else:
            key = name
        series[key].append(m)
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    nll = "answer NLL (nats/token, lower is better)"
    panels = ((axes[0], "prefill_tokens_per_question", "answer_nll", nll),
              (axes[1], "kv_len_decode", "answer_nll", nll),
              (axes[2], "kv_len_decode", "evidence_recall", "evidence recall"))
    for ax, xkey, metric, label in panels:
        for key, points in sorted(series.items()):
            points = sorted(points, key=lambda m: m[xkey])
            xs = [p[xkey] for p in points]
            ys = [p[metric] for p in points]
            style = {"full": "s", "bm25": "^--", "embed": "v--", "h2o": "D:"}.get(key, "o-")
            ax.plot(xs, ys, style, label=key, markersize=6)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(xkey.replace("_", " ") + " (log)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    convs = ", ".join(data.get("conversations", []))
    fig.suptitle(f"LoCoMo QA, {data.get('model', '')} ({convs}); points along a line: k or "
                 "budget sweep",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(dst)
    if "evidence_heads" in data:
        print(plot_heads(plt, data, re.sub(r"\.png$", "", dst) + "_heads.png"))


def plot_heads(plt, data, dst):
    """--head-report: a layer x head map of the share of evidence turns with a block among the
    head's top k by exact q.k, against chance."""
    e = data["evidence_heads"]
    heads = e["heads"]
    n_layers = 1 + max(h["layer"] for h in heads)
    n_heads = 1 + max(h["head"] for h in heads)
    grid = [[0.0] * n_heads for _ in range(n_layers)]
    for h in heads:
        grid[h["layer"]][h["head"]] = h["hit_rate"]
    fig, ax = plt.subplots(figsize=(max(4.8, 1.2 + 0.45 * n_heads), 1.0 + 0.22 * n_layers))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=0.0)
    fig.colorbar(im, ax=ax, label=f"evidence turns in the head's top {e['top_k']}")
    ax.set_xlabel("query head")
    ax.set_ylabel("layer")
    ax.set_title(f"{data.get('model', '')}: {e['turns']} evidence turns, chance "
                 f"{e['chance']:.3f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    return dst


if __name__ == "__main__":
    main()
