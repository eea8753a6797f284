#!/usr/bin/env python3
"""Plots `kvmem eval agent-trace --json FILE` results: one PNG with four panels per method
(means over traces): prefix hit rate, peak live rows against the full cache's, probe answer NLL,
and evidence kept.

    scripts/plot_agent_trace.py RESULTS.jsonl OUT.png
"""
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(path, out):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = collections.OrderedDict()
    for r in rows:
        by.setdefault(r["method"], []).append(r)
    methods = list(by)
    mean = lambda m, k: sum(r[k] for r in by[m]) / len(by[m])  # noqa: E731
    worst = lambda m, k: max(r[k] for r in by[m])  # noqa: E731
    panels = [
        ("prefix hit rate (%)", [100 * mean(m, "prefix_hit") for m in methods]),
        ("worst-case peak live rows", [worst(m, "peak_live_rows") for m in methods]),
        ("probe answer NLL (nats/token)", [mean(m, "probe_nll") for m in methods]),
        ("evidence kept (%)", [100 * mean(m, "evidence_kept") for m in methods]),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    colors = ["#777777" if m == "full" else "#c0504d" if m.endswith("/compact") else "#4f81bd"
              for m in methods]
    for ax, (title, values) in zip(axes, panels):
        ax.bar(range(len(methods)), values, color=colors)
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels(methods, rotation=60, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
    share = rows[0]["budget"] / rows[0]["length"]
    fig.suptitle(f"kvmem eval agent-trace: {len(by[methods[0]])} traces, budget C = {share:.0%} of "
                 f"each trace; grey full cache, blue dead slots, red compaction", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
