#!/usr/bin/env python3
"""Summarizes `kvmem eval locomo --answers` files into the `--json` form (per method, overall
and per category), for scripts/plot_locomo.py and merge_locomo.py: e.g. to join runs that
answered different conversations.

    scripts/locomo_summary.py OUT.json ANSWERS.jsonl[.gz][@TAG] [...] [--model NAME]

Means over the answered questions, as kvmem computes them: evidence recall over the questions
whose evidence names a turn (null recall left out). A file given as PATH@TAG has "/TAG" added to
its method names. Refuses a question (method, conversation, index) that two lines answer.
Standard library only.
"""
import argparse
import json
import sys
from collections import defaultdict

from locomo_io import lines, split_tag

METRICS = ("f1", "bleu1", "evidence_recall", "answer_nll", "prefill_tokens_per_question",
           "kv_len_decode", "latency_s")


def read_lines(arg):
    path, tag = split_tag(arg)
    for n, line in lines(path):
        try:
            row = json.loads(line)
            row["method"] = row["method"] + ("/" + tag if tag else "")
            key = (row["method"], row["conversation"], int(row["index"]))
            int(row["category"])
        except (ValueError, KeyError, TypeError) as e:
            sys.exit(f"locomo_summary: {path}:{n}: not an answer line ({e})")
        yield path, n, key, row


def summarize(rows):
    out = {"questions": len(rows)}
    for m in METRICS:
        vals = [r[m] for r in rows if r.get(m) is not None]
        out[m] = sum(vals) / len(vals) if vals else 0.0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("answers", nargs="+")
    ap.add_argument("--model", default="")
    a = ap.parse_args()
    seen = {}
    by_method = defaultdict(list)
    convs = []
    for arg in a.answers:
        for path, n, key, row in read_lines(arg):
            if key in seen:
                sys.exit(f"locomo_summary: {path}:{n}: {key} is answered again (first in "
                         f"{seen[key]})")
            seen[key] = f"{path}:{n}"
            by_method[row["method"]].append(row)
            if row["conversation"] not in convs:
                convs.append(row["conversation"])
    if not by_method:
        sys.exit("locomo_summary: no answers")
    out = {"model": a.model, "conversations": convs, "methods": {}}
    for method, rows in by_method.items():
        m = summarize(rows)
        cats = defaultdict(list)
        for r in rows:
            cats[int(r["category"])].append(r)
        m["by_category"] = {str(c): summarize(cats[c]) for c in sorted(cats)}
        out["methods"][method] = m
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(a.out)


if __name__ == "__main__":
    main()
