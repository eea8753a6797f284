#!/usr/bin/env python3
"""Summarizes `kvmem eval segments` JSON lines: a Markdown table per method (steps after the
first of each world, which builds every cache), paired 95% intervals of KL differences between
KEEP and each baseline (the same steps), and a PNG of TTFT and KL per method.

  scripts/keep_summary.py RESULTS.jsonl [--png OUT.png] [--min-segments N]
"""
import argparse
import json
import math
import sys
from collections import defaultdict


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def interval(diffs):
    """Mean and half-width of a normal 95% interval of paired differences."""
    n = len(diffs)
    if n < 2:
        return mean(diffs), float("nan")
    m = mean(diffs)
    sd = math.sqrt(sum((d - m) ** 2 for d in diffs) / (n - 1))
    return m, 1.96 * sd / math.sqrt(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("results")
    ap.add_argument("--png")
    ap.add_argument("--min-segments", type=int, default=0)
    a = ap.parse_args()
    rows = [json.loads(l) for l in open(a.results) if l.strip()]
    rows = [r for r in rows if r["step"] > 0 and r["segments"] >= a.min_segments]
    by = defaultdict(list)
    for r in rows:
        by[r["method"]].append(r)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    if "full" not in by:
        sys.exit("no rows of full (the reference)")
    full_ttft = mean([r["ttft_ms"] for r in by["full"]])
    print("| method | steps | TTFT ms | vs full | prefilled tokens | recomputed share | gold NLL | KL to full | greedy = full |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in methods:
        rs = by[m]
        t = mean([r["ttft_ms"] for r in rs])
        print(f"| {m} | {len(rs)} | {t:.0f} | {full_ttft / t:.2f}x | {mean([r['prefilled'] for r in rs]):.0f} | "
              f"{mean([r['computed_share'] for r in rs]):.3f} | {mean([r['nll'] for r in rs]):.3f} | "
              f"{mean([r.get('kl', 0) for r in rs]):.4f} | {100 * mean([1.0 if r.get('agree') else 0.0 for r in rs]):.0f}% |")
    key = lambda r: (r["world"], r["step"])
    print()
    for ref in ("keep",):
        if ref not in by:
            continue
        mine = {key(r): r for r in by[ref]}
        for other in methods:
            if other in (ref, "full", "prefix"):
                continue
            pairs = [(mine[key(r)], r) for r in by[other] if key(r) in mine]
            kl_m, kl_h = interval([x.get("kl", 0) - y.get("kl", 0) for x, y in pairs])
            t_m = mean([y["ttft_ms"] / x["ttft_ms"] for x, y in pairs])
            print(f"- {ref} - {other}: KL difference {kl_m:+.4f} ± {kl_h:.4f} (95%, {len(pairs)} paired steps); "
                  f"{other}'s TTFT / {ref}'s: {t_m:.2f}x")
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        ttft = [mean([r["ttft_ms"] for r in by[m]]) for m in methods]
        kl = [mean([r.get("kl", 0) for r in by[m]]) for m in methods]
        ax[0].bar(methods, ttft, color="#4a7bb7")
        ax[0].set_ylabel("TTFT, ms (mean per step)")
        ax[1].bar(methods, kl, color="#c0504d")
        ax[1].set_ylabel("KL of the first answer token to full")
        for x in ax:
            x.tick_params(axis="x", rotation=35)
        fig.suptitle("kvmem eval segments: " + a.results.split("/")[-1])
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
