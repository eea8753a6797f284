#!/usr/bin/env python3
"""Plots EpiCache's peak memory against the history's length from `kvmem eval locomo --json`
files of concatenated conversations (`--concat`), one file per history length and method:

    ~/.cache/kvmem/venv/bin/python scripts/plot_epicache_peak.py OUT.png RUN.json [RUN.json ...]

Each run contributes, per method, the history tokens fed, the agent pool's peak
(kv_peak_bytes) and the process's peak RSS (peak_rss_bytes: model, encoder and all). Prints the
table it plots (Markdown) and writes the PNG (two panels: pool peak, peak RSS; MiB).
"""
import json
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    dst, runs = sys.argv[1], sys.argv[2:]
    points = {}  # method -> [(history, pool MiB, rss MiB)]
    for path in runs:
        with open(path) as f:
            d = json.load(f)
        for method, m in d["methods"].items():
            if "history_tokens" not in m or "kv_peak_bytes" not in m:
                continue
            points.setdefault(method, []).append(
                (m["history_tokens"], m["kv_peak_bytes"] / 2**20, d["peak_rss_bytes"] / 2**20))
    print("| method | history tokens | pool peak MiB | peak RSS MiB |")
    print("|---|---:|---:|---:|")
    for method, pts in sorted(points.items()):
        for h, pool, rss in sorted(pts):
            print(f"| {method} | {h:,} | {pool:.1f} | {rss:.1f} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is missing: ~/.cache/kvmem/venv/bin/pip install matplotlib")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for method, pts in sorted(points.items()):
        pts.sort()
        xs = [p[0] for p in pts]
        axes[0].plot(xs, [p[1] for p in pts], marker="o", label=method)
        axes[1].plot(xs, [p[2] for p in pts], marker="o", label=method)
    axes[0].set_title("KV pool peak")
    axes[1].set_title("process peak RSS")
    for ax in axes:
        ax.set_xlabel("history tokens")
        ax.set_ylabel("MiB")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
