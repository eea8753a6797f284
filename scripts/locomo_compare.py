#!/usr/bin/env python3
"""Two `kvmem eval locomo --answers` files of the same questions, compared answer by answer:
for each method, how many predictions are equal, the largest difference of answer NLL, and the
mean of each metric in both. Checks that a change of code keeps what is measured (the policy
seam's refactor: docs/eval/README.md). Exit status 1 when --nll-tol is given and exceeded or a
prediction differs.

  python3 scripts/locomo_compare.py before.jsonl after.jsonl [--nll-tol 1e-4]
Standard library only."""
import argparse
import json
import sys

from locomo_io import lines


def load(path):
    out = {}
    for n, line in lines(path):
        r = json.loads(line)
        out[(r["method"], r["conversation"], r["index"])] = r
    return out


def compare(before, after):
    """{method: {"questions", "same_prediction", "max_nll_diff", "before": {...}, "after": {...}}}"""
    report = {}
    for key in sorted(set(before) & set(after)):
        method = key[0]
        a, b = before[key], after[key]
        m = report.setdefault(method, {"questions": 0, "same_prediction": 0, "max_nll_diff": 0.0,
                                       "before": {}, "after": {}})
        m["questions"] += 1
        m["same_prediction"] += a["prediction"] == b["prediction"]
        m["max_nll_diff"] = max(m["max_nll_diff"], abs(a["answer_nll"] - b["answer_nll"]))
        for metric in ("f1", "answer_nll", "evidence_recall", "prefill_tokens_per_question",
                       "kv_len_decode"):
            for side, r in (("before", a), ("after", b)):
                if r[metric] is not None:  # recall is null without evidence turns
                    total, n = m[side].get(metric, (0.0, 0))
                    m[side][metric] = (total + r[metric], n + 1)
    for m in report.values():
        for side in ("before", "after"):
            for metric, (total, n) in m[side].items():
                m[side][metric] = total / n
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--nll-tol", type=float, default=None)
    args = p.parse_args()
    before, after = load(args.before), load(args.after)
    missing = set(before) ^ set(after)
    report = compare(before, after)
    ok = not missing
    print("| method | questions | same prediction | max |NLL diff| | F1 | NLL | recall | "
          "prefill | KV |\n|---|---:|---:|---:|---|---|---|---|---|")
    for method, m in report.items():
        cells = " | ".join(f"{m['before'].get(k, float('nan')):.4g} / "
                           f"{m['after'].get(k, float('nan')):.4g}"
                           for k in ("f1", "answer_nll", "evidence_recall",
                                     "prefill_tokens_per_question", "kv_len_decode"))
        print(f"| {method} | {m['questions']} | {m['same_prediction']} | "
              f"{m['max_nll_diff']:.2e} | {cells} |")
        if args.nll_tol is not None:
            ok &= m["max_nll_diff"] <= args.nll_tol and m["same_prediction"] == m["questions"]
    if missing:
        print(f"{len(missing)} answers are in one file only", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
