#!/usr/bin/env python3
"""Merges `kvmem eval locomo --json` files of runs over the same conversations into one, for
scripts/plot_locomo.py.

    scripts/merge_locomo.py OUT.json IN.json[@TAG] [IN.json[@TAG] ...]

A file given as IN.json@TAG has "/TAG" added to its method names (e.g. @w1024 for a run with
--ingest-window 1024: plot_locomo.py draws /wN variants as their own lines). Refuses files of
different models or conversations, and a method name that two files share.
"""
import json
import sys

from locomo_io import split_tag


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = {"methods": {}}
    for arg in sys.argv[2:]:
        path, tag = split_tag(arg)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for key in ("model", "conversations"):
            if key in out and out[key] != data.get(key):
                sys.exit(f"merge_locomo: {path}: {key} {data.get(key)} differs from {out[key]}")
            out[key] = data.get(key)
        for name, m in data.get("methods", {}).items():
            name = name + ("/" + tag if tag else "")
            if name in out["methods"]:
                sys.exit(f"merge_locomo: {path}: method {name} is in an earlier file")
            out["methods"][name] = m
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(sys.argv[1])


if __name__ == "__main__":
    main()
