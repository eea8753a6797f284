"""Runs each multi-agent scenario twice, with caching (each agent's turns extend its KV cache)
and without (every turn prefills the agent's whole conversation: semantic.md's baseline), each
time with a fresh store, and writes per scenario the two JSON reports and transcripts, a Markdown
table of prompt / cached / prefilled tokens and mean TTFT per phase, and a PNG of prefilled
tokens per phase.

    ~/.cache/kvmem/venv/bin/python bench/scenarios.py [--out docs/eval/scenarios] [YAML...]

Default: scenarios/*.yaml, the default model, 2 threads, in-process engine."""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.path.join(ROOT, "build", "apps", "kvmem")


def run(yaml, out_dir, cache, threads):
    name = os.path.splitext(os.path.basename(yaml))[0]
    tag = "cache" if cache else "nocache"
    report = os.path.join(out_dir, f"{name}-{tag}.json")
    transcript = os.path.join(out_dir, f"{name}-{tag}.md")
    with tempfile.TemporaryDirectory() as store:
        cmd = [BIN, "scenario", "run", yaml, "--store", store, "-t", str(threads), "--json", report,
               "--transcript", transcript]
        if not cache:
            cmd.append("--no-cache")
        start = time.time()
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        wall = time.time() - start
    with open(report) as f:
        r = json.load(f)
    r["wall_s"] = wall
    return r


def phase_sums(report):
    rows = []
    for p in report["phases"]:
        agents = p["agents"].values()
        turns = sum(a["turns"] for a in agents)
        rows.append({"name": p["name"],
                     "prompt": sum(a["prompt_tokens"] for a in agents),
                     "cached": sum(a["cached_tokens"] for a in agents),
                     "prefilled": sum(a["prefilled_tokens"] for a in agents),
                     "ttft_ms": sum(a["ttft_ms"] * a["turns"] for a in agents) / max(turns, 1)})
    return rows


def table(name, on, off):
    lines = [f"### {name}", "",
             "| phase | prompt tokens | cached (on) | prefilled (on) | prefilled (off) | "
             "mean TTFT on / off (ms) |", "|---|---:|---:|---:|---:|---:|"]
    for a, b in zip(phase_sums(on), phase_sums(off)):
        lines.append(f"| {a['name']} | {a['prompt']} | {a['cached']} | {a['prefilled']} | "
                     f"{b['prefilled']} | {a['ttft_ms']:.0f} / {b['ttft_ms']:.0f} |")
    t_on, t_off = on["totals"], off["totals"]
    lines.append(f"| **all** | {t_on['prompt_tokens']} | {t_on['cached_tokens']} | "
                 f"{t_on['prefilled_tokens']} | {t_off['prefilled_tokens']} | "
                 f"wall {on['wall_s']:.1f} s / {off['wall_s']:.1f} s |")
    return "\n".join(lines) + "\n"


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6), squeeze=False)
    for ax, (name, on, off) in zip(axes[0], results):
        a, b = phase_sums(on), phase_sums(off)
        xs = range(len(a))
        ax.bar([x - 0.2 for x in xs], [r["prefilled"] for r in b], 0.4, label="caching off")
        ax.bar([x + 0.2 for x in xs], [r["prefilled"] for r in a], 0.4, label="caching on")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["name"] for r in a], rotation=30, ha="right", fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("prefilled tokens")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("yaml", nargs="*")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "eval", "scenarios"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    yamls = args.yaml or sorted(glob.glob(os.path.join(ROOT, "scenarios", "*.yaml")))
    os.makedirs(args.out, exist_ok=True)
    results = []
    for y in yamls:
        name = os.path.splitext(os.path.basename(y))[0]
        print(f"{name}: caching on", file=sys.stderr, flush=True)
        on = run(y, args.out, True, args.threads)
        print(f"{name}: caching off", file=sys.stderr, flush=True)
        off = run(y, args.out, False, args.threads)
        results.append((name, on, off))
    md = "".join(table(n, on, off) + "\n" for n, on, off in results)
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write(md)
    plot(results, os.path.join(args.out, "prefilled.png"))
    print(md)


if __name__ == "__main__":
    main()
