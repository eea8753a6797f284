#!/usr/bin/env python3
"""Paired comparison of `kvmem eval locomo` methods, question by question.

    scripts/locomo_paired.py ANSWERS.jsonl[@TAG] ... --base METHOD[@TAG] [--metric answer_nll]

ANSWERS.jsonl: what `kvmem eval locomo --answers` writes, one line per answered question (or
that file gzipped, ending in .gz). Files from separate runs over the same conversations may be
given together: questions are matched by conversation, place among the conversation's asked
questions, and text. A file given as PATH@TAG has "@TAG" added to its method names, so runs of
the same methods (ingested differently, say) can be compared.

For every other method, prints the mean of (method - base) over the questions both answered,
and a 95% interval for it from a paired bootstrap (resampling questions; 10,000 draws, fixed
seed), so a difference of a few hundredths of a nat can be told from the noise of which
questions were asked. Where both methods routed their questions to episodes (epicache's answer
records carry "episode"), also prints how alike the two routings are: the adjusted Rand index
of the two partitions of the questions (1: the same grouping, whatever the episodes' numbers;
about 0: no more alike than chance). --from-index N keeps the questions from the N-th of each conversation on
(e.g. 30: those that --limit 30 runs did not ask). Standard library only.
"""
import argparse
import json
import random
import sys

from locomo_io import lines, split_tag


def load(paths, from_index):
    by_method = {}
    counts = {}
    for arg in paths:
        path, tag = split_tag(arg)
        for n, line in lines(path):
            try:
                r = json.loads(line)
                method = r["method"] + ("@" + tag if tag else "")
                if "index" not in r:  # older files: records come in question order
                    seen = counts.setdefault((method, r["conversation"]), [0])
                    r["index"] = seen[0]
                    seen[0] += 1
                if r["index"] < from_index:
                    continue
                key = (r["conversation"], r["index"], r["question"])
                by_method.setdefault(method, {})[key] = r
            except (ValueError, KeyError) as e:
                sys.exit(f"{path}:{n}: not an answer record ({e})")
    return by_method


def paired(base, other, metric, draws, rng):
    keys = [k for k in base if k in other and base[k].get(metric) is not None
            and other[k].get(metric) is not None]
    if not keys:
        return None
    d = [other[k][metric] - base[k][metric] for k in keys]
    mean = sum(d) / len(d)
    means = []
    for _ in range(draws):
        s = 0.0
        for _ in range(len(d)):
            s += d[rng.randrange(len(d))]
        means.append(s / len(d))
    means.sort()
    lo = means[int(0.025 * draws)]
    hi = means[min(draws - 1, int(0.975 * draws))]
    wins = sum(1 for x in d if x < 0)
    return len(d), mean, lo, hi, wins


def comb2(n):
    return n * (n - 1) / 2


def adjusted_rand_index(a, b):
    """Hubert & Arabie's adjusted Rand index of two labelings of the same items (1.0 when both
    put everything in one group, as sklearn)."""
    n = len(a)
    pairs, rows, cols = {}, {}, {}
    for x, y in zip(a, b):
        pairs[(x, y)] = pairs.get((x, y), 0) + 1
        rows[x] = rows.get(x, 0) + 1
        cols[y] = cols.get(y, 0) + 1
    index = sum(comb2(c) for c in pairs.values())
    sum_rows = sum(comb2(c) for c in rows.values())
    sum_cols = sum(comb2(c) for c in cols.values())
    expected = sum_rows * sum_cols / comb2(n) if n > 1 else 0.0
    top = (sum_rows + sum_cols) / 2
    if top == expected:
        return 1.0
    return (index - expected) / (top - expected)


def routing_agreement(base, other):
    keys = [k for k in base if k in other and "episode" in base[k] and "episode" in other[k]]
    if not keys:
        return None
    return len(keys), adjusted_rand_index([base[k]["episode"] for k in keys],
                                          [other[k]["episode"] for k in keys])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("answers", nargs="+")
    p.add_argument("--base", required=True, help="the method every other is compared with")
    p.add_argument("--metric", default="answer_nll",
                   help="answer_nll (default), evidence_recall, f1, bleu1, ...")
    p.add_argument("--draws", type=int, default=10000)
    p.add_argument("--from-index", type=int, default=0,
                   help="only the questions from this place on among each conversation's asked ones")
    a = p.parse_args()
    by_method = load(a.answers, a.from_index)
    if a.base not in by_method:
        sys.exit(f"--base {a.base}: no such method (have: {', '.join(sorted(by_method))})")
    rng = random.Random(1)
    print(f"{a.metric}: method minus {a.base}, paired by question, 95% bootstrap interval")
    print()
    print("| method | questions | mean difference | 95% interval | questions below base |")
    print("|---|---:|---:|---|---:|")
    for m in sorted(by_method):
        if m == a.base:
            continue
        r = paired(by_method[a.base], by_method[m], a.metric, a.draws, rng)
        if r is None:
            print(f"| {m} | 0 | | | |")
            continue
        n, mean, lo, hi, wins = r
        print(f"| {m} | {n} | {mean:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {wins} |")
    routed = [(m, routing_agreement(by_method[a.base], by_method[m]))
              for m in sorted(by_method) if m != a.base]
    routed = [(m, r) for m, r in routed if r is not None]
    if routed:
        print()
        print(f"Episode routing against {a.base}: adjusted Rand index of the questions' episodes")
        print()
        print("| method | questions | adjusted Rand index |")
        print("|---|---:|---:|")
        for m, (n, ari) in routed:
            print(f"| {m} | {n} | {ari:.3f} |")


if __name__ == "__main__":
    main()
