#!/usr/bin/env python3
"""TTFT of an agent's follow-up turn after a long history: cold (no cache: the whole history is
prefilled), hot (the agent's cache in RAM) and warm (the server was killed and restarted: the
cache comes from the store on disk / page cache). Prints a table with the ratios, measured in the
same run on the same machine, and writes JSON lines with --json.

The three time the same request with the same cache: each repetition builds two agents with the
same two turns (greedy, so the same replies), asks the first one the third turn while it is in
RAM (hot), restarts the server and asks the second one (warm), then asks it anonymously (cold).
Each row also gives the tokens the hot and warm turns prefilled; they must be equal.

  bench/agent_resume.py [--model GGUF] [--lengths 1024,4096,7000] [--reps 3] [--json OUT]

History: LoCoMo dialogue (../shared/data/locomo) as alternating user/assistant turns, cut to about
the requested token count. Each measurement streams the request and times the first content
delta (client side, so HTTP and the server's parsing are included). Needs a built kvmem
(BUILD, default build/) and the venv's python for nothing but the standard library.
"""
import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
os.environ.setdefault("KVMEM_BIN", os.path.join(HERE, "..", os.environ.get("BUILD", "build"),
                                                "apps", "kvmem"))
import server_util  # noqa: E402


def locomo_turns(data_dir):
    turns = []
    for path in sorted(glob.glob(os.path.join(data_dir, "*.json"))):
        conv = json.load(open(path))
        conv = conv.get("conversation", conv)
        n = 1
        while f"session_{n}" in conv:
            for t in conv[f"session_{n}"]:
                turns.append(f"{t['speaker']}: {t['text']}")
            n += 1
    return turns


def history(turns, approx_tokens):
    """Alternating user/assistant messages of about approx_tokens (4 chars per token)."""
    msgs, chars = [], 0
    for i, t in enumerate(turns):
        if chars >= approx_tokens * 4:
            break
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": t})
        chars += len(t) + 12
    if msgs[-1]["role"] == "user":
        msgs.pop()
    return msgs


def ttft(url, msgs, agent):
    """(seconds to the first content delta, reply text, usage)."""
    body = {"model": "kvmem", "messages": msgs, "max_tokens": 8, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    if agent:
        body["user"] = agent
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, text, usage = None, [], None
    try:
        r = urllib.request.urlopen(req, timeout=3600)
    except urllib.error.HTTPError as e:
        sys.exit(f"agent_resume: HTTP {e.code}: {e.read().decode()[:500]}")
    with r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for c in chunk.get("choices", []):
                if c["delta"].get("content"):
                    first = first or time.perf_counter() - t0
                    text.append(c["delta"]["content"])
    return first, "".join(text), usage


def prefilled(usage):
    return usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=server_util.MODEL)
    # History lengths (approximate tokens); they must fit the model's context with the turns.
    ap.add_argument("--lengths", default="1024,4096,7000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "shared", "data", "locomo"))
    ap.add_argument("--json")
    args = ap.parse_args()
    turns = locomo_turns(args.data)
    lengths = [int(x) for x in args.lengths.split(",")]
    ctx = int(max(lengths) * 1.3) + 1024  # the runtime caps it at the model's context
    rows = []
    with tempfile.TemporaryDirectory() as store:
        def start():
            return server_util.Server(store, threads=args.threads, ctx=ctx, model=args.model)
        srv = start()
        try:
            for n in lengths:
                base = history(turns, n)
                res = {"cold": [], "hot": [], "warm": []}
                for rep in range(args.reps):
                    q1 = base + [{"role": "user", "content": f"Question {rep}: who spoke first?"}]
                    q3 = {}
                    for role in ("hot", "warm"):  # two agents, the same two turns
                        agent = f"resume-{n}-{rep}-{role}"
                        _, reply1, _ = ttft(srv.url, q1, agent)  # builds the agent's cache
                        q2 = q1 + [{"role": "assistant", "content": reply1},
                                   {"role": "user", "content": "And who spoke last?"}]
                        _, reply2, _ = ttft(srv.url, q2, agent)
                        q3[role] = q2 + [{"role": "assistant", "content": reply2},
                                         {"role": "user", "content": "Thanks. Summarize in one word."}]
                    if q3["hot"] != q3["warm"]:
                        sys.exit("agent_resume: the two agents' greedy replies differ")
                    time.sleep(1)  # the turns' saves are written after their replies
                    t_hot, _, u_hot = ttft(srv.url, q3["hot"], f"resume-{n}-{rep}-hot")
                    res["hot"].append((t_hot, u_hot))
                    srv.kill()
                    srv = start()
                    t_warm, _, u_warm = ttft(srv.url, q3["warm"], f"resume-{n}-{rep}-warm")
                    res["warm"].append((t_warm, u_warm))
                    t_cold, _, uc = ttft(srv.url, q3["warm"], None)  # anonymous: nothing cached
                    res["cold"].append((t_cold, uc))
                    print(f"history {u_warm['prompt_tokens']} tokens, rep {rep + 1}: "
                          f"cold {t_cold:.3f} s, hot {t_hot:.3f} s ({prefilled(u_hot)} prefilled), "
                          f"warm {t_warm:.3f} s ({prefilled(u_warm)} prefilled)",
                          file=sys.stderr, flush=True)
                med = {k: statistics.median(t for t, _ in v) for k, v in res.items()}
                row = {"history_tokens": res["warm"][0][1]["prompt_tokens"],
                       "cached_tokens_warm": res["warm"][0][1]["prompt_tokens_details"]["cached_tokens"],
                       "prefilled_hot": [prefilled(u) for _, u in res["hot"]],
                       "prefilled_warm": [prefilled(u) for _, u in res["warm"]],
                       "ttft_cold_s": med["cold"], "ttft_hot_s": med["hot"], "ttft_warm_s": med["warm"],
                       "cold_over_hot": med["cold"] / med["hot"],
                       "cold_over_warm": med["cold"] / med["warm"],
                       "warm_over_hot": med["warm"] / med["hot"]}
                rows.append(row)
        finally:  # also after an error: never leave a server running
            srv.stop()
    name = os.path.basename(args.model)
    print(f"\nagent resume, {name}, {args.threads} threads, median of {args.reps}")
    print(f"{'history':>8} {'cached':>7} {'prefilled':>9} {'cold s':>8} {'hot s':>7} {'warm s':>7} "
          f"{'cold/hot':>9} {'cold/warm':>10} {'warm/hot':>9}")
    for r in rows:
        print(f"{r['history_tokens']:>8} {r['cached_tokens_warm']:>7} "
              f"{r['history_tokens'] - r['cached_tokens_warm']:>9} {r['ttft_cold_s']:>8.3f} "
              f"{r['ttft_hot_s']:>7.3f} {r['ttft_warm_s']:>7.3f} {r['cold_over_hot']:>8.1f}x "
              f"{r['cold_over_warm']:>9.1f}x {r['warm_over_hot']:>8.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps({"model": name, **r}) + "\n")


if __name__ == "__main__":
    main()
