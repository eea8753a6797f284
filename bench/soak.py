#!/usr/bin/env python3
"""Load and soak: mixed traffic against one `kvmem serve` for --minutes (issue 29 §3).

A bounded client (--clients threads on loopback, each holding one agent at a time) drives
--agents agents spread over two tenants (`--api-key KEY:TENANT`), each request one of four kinds:
OpenAI chat streamed or not, Anthropic messages streamed or not. Conversations grow for a few
turns and then restart from scratch (the server forks the old one into a checkpoint), so caches
are reused and diverge; --hot-mib is small, so agents are evicted to the store and reloaded warm.
Some streams are dropped on purpose after their first token (--disconnect-frac).

Every request's status and TTFT are recorded (streams: time to the first text delta; otherwise:
time to the whole response). The server's RSS (/proc/PID/status VmRSS) is sampled every
--rss-every seconds. Warm-up is the first --warmup-frac of the run, at least --warmup-min-s
seconds: RSS drift is measured against the RSS at its end (max and min after it).

Expected statuses: 200, and the designed refusals 429/529 (admission) and 503 (accept queue).
Anything else, a transport error, or a stream that ends without its final event is an error.

Output: a JSON report (--json) and a PNG (--png: RSS and TTFT over time). With --check the exit
status is 1 when there is any error, the server died, or |RSS drift| > --max-drift-pct.

  PY=~/.cache/kvmem/venv/bin/python
  $PY bench/soak.py --minutes 30 --json docs/eval/soak/soak.json --png docs/eval/soak/soak.png
  $PY bench/soak.py --minutes 2 --check        # tests/long/test_soak.py
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.environ.get("KVMEM_BIN", os.path.join(ROOT, "build/apps/kvmem"))
MODEL = os.path.join(os.environ.get("KVMEM_HOME", os.path.expanduser("~/.cache/kvmem")),
                     "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
KINDS = ["openai", "openai_stream", "anthropic", "anthropic_stream"]
DESIGNED = {429, 503, 529}
TENANTS = [("soak-key-a", "tenant-a"), ("soak-key-b", "tenant-b")]
WORDS = ("apple river stone cloud lamp garden violin copper harbor maple winter orbit lantern "
         "meadow pepper signal canyon ribbon falcon marble").split()


def start_server(args, store):
    log = tempfile.NamedTemporaryFile(prefix="kvmem-soak-", suffix=".log", delete=False)
    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "--store", store,
           "-t", str(args.threads), "-c", str(args.ctx), "--hot-mib", str(args.hot_mib)]
    for key, tenant in TENANTS:
        cmd += ["--api-key", f"{key}:{tenant}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.time() + 60
    while time.time() < deadline:
        with open(log.name, errors="replace") as f:
            m = re.search(r"on http://[^:]+:(\d+)", f.read())
        if m:
            return proc, int(m.group(1)), log.name, cmd
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    with open(log.name, errors="replace") as f:
        sys.exit(f"kvmem serve did not start:\n{f.read()}")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


class Agent:
    def __init__(self, name, key, rng):
        self.name, self.key = name, key
        self.msgs = []                      # the acknowledged conversation
        self.turns_left = rng.randint(3, 10)
        self.lock = threading.Lock()


def request_body(kind, agent, msgs, max_tokens):
    if kind.startswith("openai"):
        body = {"model": "kvmem", "messages": msgs, "max_tokens": max_tokens, "temperature": 0.7,
                "user": agent.name}
        if kind.endswith("stream"):
            body["stream"] = True
        return "/v1/chat/completions", body
    body = {"model": "kvmem", "messages": msgs, "max_tokens": max_tokens, "temperature": 0.7,
            "metadata": {"user_id": agent.name}}
    if kind.endswith("stream"):
        body["stream"] = True
    return "/v1/messages", body


def read_stream(resp, kind, t0, rec, disconnect):
    """Reads an SSE reply; returns its text. Sets rec['ttft'] at the first text delta; raises on
    a stream that ends without its final event (OpenAI [DONE], Anthropic message_stop)."""
    text = []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if kind == "openai_stream":
            if data == "[DONE]":
                return "".join(text)
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(f"error event: {data[:300]}")
            piece = "".join(c["delta"].get("content") or "" for c in chunk.get("choices", []))
        else:
            ev = json.loads(data)
            if ev.get("type") == "message_stop":
                return "".join(text)
            if ev.get("type") == "error":
                raise RuntimeError(f"error event: {data[:300]}")
            piece = ev["delta"].get("text", "") if ev.get("type") == "content_block_delta" else ""
        if piece:
            text.append(piece)
            rec.setdefault("ttft", time.perf_counter() - t0)
            if disconnect:
                return None
    raise RuntimeError("stream ended without its final event")


def one_request(port, kind, agent, msgs, max_tokens, disconnect, timeout):
    """Sends one turn; returns (record, reply text or None)."""
    path, body = request_body(kind, agent, msgs, max_tokens)
    rec = {"kind": kind, "agent": agent.name, "status": None}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    rec["t"] = time.time()
    reply = None
    try:
        conn.request("POST", path, json.dumps(body),
                     {"Content-Type": "application/json", "x-api-key": agent.key,
                      "anthropic-version": "2023-06-01"})
        resp = conn.getresponse()
        rec["status"] = resp.status
        if resp.status != 200:
            rec["body"] = resp.read().decode(errors="replace")[:300]
        elif kind.endswith("stream"):
            reply = read_stream(resp, kind, t0, rec, disconnect)
            rec["disconnected"] = disconnect and reply is None
        else:
            obj = json.loads(resp.read())
            rec["ttft"] = time.perf_counter() - t0
            if kind == "openai":
                reply = obj["choices"][0]["message"]["content"] or ""
            else:
                reply = "".join(b.get("text", "") for b in obj["content"])
    except Exception as e:  # transport errors, bad JSON, streams cut short: all errors
        rec["error"] = repr(e)[:300]
    finally:
        conn.close()  # a disconnect on purpose: the socket closes after the first token
    rec["total"] = time.perf_counter() - t0
    return rec, reply


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.agents = [Agent(f"soak-{i:02d}", TENANTS[i % 2][0], self.rng) for i in range(args.agents)]
        self.records = []
        self.rss = []          # (seconds since start, KiB)
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def pick_agent(self, rng):
        while not self.stop.is_set():
            a = rng.choice(self.agents)
            if a.lock.acquire(blocking=False):
                return a
            time.sleep(0.001)
        return None

    def client(self, seed):
        rng = random.Random(seed)
        while not self.stop.is_set():
            agent = self.pick_agent(rng)
            if agent is None:
                return
            try:
                self.turn(agent, rng)
            finally:
                agent.lock.release()

    def turn(self, agent, rng):
        if agent.turns_left <= 0:  # the conversation restarts: the old one becomes a checkpoint
            agent.msgs, agent.turns_left = [], rng.randint(3, 10)
        kind = rng.choice(KINDS)
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 40)))
        msgs = agent.msgs + [{"role": "user", "content": f"Remember these words: {words}. "
                                                         f"Which one is your favourite?"}]
        disconnect = kind.endswith("stream") and rng.random() < self.args.disconnect_frac
        rec, reply = one_request(self.port, kind, agent, msgs, rng.randint(8, 48), disconnect,
                                 self.args.timeout)
        rec["t"] -= self.t_start
        if rec["status"] == 200 and "error" not in rec and reply is not None:
            agent.msgs = msgs + [{"role": "assistant", "content": reply}]
            agent.turns_left -= 1
        with self.lock:
            self.records.append(rec)
        if rec["status"] in DESIGNED:
            time.sleep(0.2)

    def sample_rss(self):
        while not self.stop.is_set():
            if self.proc.poll() is not None:
                return
            self.rss.append((time.time() - self.t_start, rss_kib(self.proc.pid)))
            self.stop.wait(self.args.rss_every)

    def progress(self):
        while not self.stop.wait(self.args.progress_every):
            with self.lock:
                recs = list(self.records)
            el = time.time() - self.t_start
            by = {}
            for r in recs:
                k = outcome(r)
                by[k] = by.get(k, 0) + 1
            rss = self.rss[-1][1] / 1024 if self.rss else 0
            ttft = sorted(r["ttft"] for r in recs if "ttft" in r)
            p99 = pct(ttft, 99) if ttft else float("nan")
            print(f"[soak {el:6.0f}s] {len(recs)} requests {by} RSS {rss:.0f} MiB "
                  f"TTFT p99 {p99 * 1000:.0f} ms", file=sys.stderr, flush=True)

    def run(self):
        a = self.args
        self.store = tempfile.mkdtemp(prefix="kvmem-soak-store-")
        self.proc, self.port, self.log, self.cmd = start_server(a, self.store)
        self.t_start = time.time()
        threads = [threading.Thread(target=self.client, args=(a.seed * 1000 + i,))
                   for i in range(a.clients)]
        threads += [threading.Thread(target=self.sample_rss), threading.Thread(target=self.progress)]
        for t in threads:
            t.start()
        try:
            while time.time() - self.t_start < a.minutes * 60 and self.proc.poll() is None:
                time.sleep(0.5)
        finally:
            self.stop.set()
            for t in threads:
                t.join()
        self.duration = time.time() - self.t_start
        self.alive = self.proc.poll() is None
        self.metrics = scrape_metrics(self.port) if self.alive else ""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with open(self.log, errors="replace") as f:
            self.server_log = f.read()
        os.unlink(self.log)
        subprocess.run(["rm", "-rf", self.store])


def scrape_metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics", headers={"x-api-key": TENANTS[0][0]})
        return conn.getresponse().read().decode()
    except Exception as e:
        return f"# scrape failed: {e!r}"
    finally:
        conn.close()


def outcome(r):
    if "error" in r:
        return "error"
    if r["status"] == 200:
        return "disconnected" if r.get("disconnected") else "200"
    return str(r["status"]) if r["status"] in DESIGNED else f"error_{r['status']}"


def pct(sorted_xs, p):
    if not sorted_xs:
        return None
    i = min(len(sorted_xs) - 1, max(0, int(round(p / 100 * len(sorted_xs) + 0.5)) - 1))
    return sorted_xs[i]


def metric_samples(text, name):
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key[len(name):] or "value"] = float(value)
    return out


def report(s):
    a = s.args
    warmup = max(a.warmup_frac * s.duration, min(a.warmup_min_s, s.duration / 2))
    by = {}
    for r in s.records:
        k = outcome(r)
        by[k] = by.get(k, 0) + 1
    errors = [r for r in s.records if outcome(r).startswith("error")]
    ttft = {}
    for kind in KINDS + ["all"]:
        xs = sorted(r["ttft"] for r in s.records
                    if "ttft" in r and r["status"] == 200 and (kind == "all" or r["kind"] == kind))
        ttft[kind] = {"n": len(xs), **{f"p{p}_ms": round(pct(xs, p) * 1000, 1) if xs else None
                                       for p in (50, 90, 99)}}
    before = [kib for t, kib in s.rss if t <= warmup]
    after = [kib for t, kib in s.rss if t > warmup]
    rss = {"warmup_s": round(warmup, 1), "samples": len(s.rss), "every_s": a.rss_every}
    if before and after:
        base = before[-1]
        rss.update({"start_mib": round(s.rss[0][1] / 1024, 1),
                    "warmup_end_mib": round(base / 1024, 1),
                    "max_after_mib": round(max(after) / 1024, 1),
                    "min_after_mib": round(min(after) / 1024, 1),
                    "end_mib": round(after[-1] / 1024, 1),
                    "drift_max_pct": round(100 * (max(after) - base) / base, 2),
                    "drift_min_pct": round(100 * (min(after) - base) / base, 2)})
    damaged = s.server_log.count("stored cache not used")
    out = {
        "command": " ".join(sys.argv),
        "server": " ".join(s.cmd),
        "duration_s": round(s.duration, 1),
        "clients": a.clients, "agents": a.agents, "tenants": len(TENANTS),
        "hot_mib": a.hot_mib, "disconnect_frac": a.disconnect_frac,
        "requests": len(s.records), "by_status": dict(sorted(by.items())),
        "by_kind": {k: sum(r["kind"] == k for r in s.records) for k in KINDS},
        "unexpected_errors": len(errors),
        "errors": errors[:50],
        "server_alive_at_end": s.alive,
        "damaged_cache_logs": damaged,
        "ttft": ttft,
        "rss": rss,
        "tier_lookups": metric_samples(s.metrics, "kvmem_agent_cache_lookups_total"),
        "generations_finished": metric_samples(s.metrics, "kvmem_generations_finished_total"),
    }
    return out, warmup


def plot(s, warmup, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    ax1.plot([t / 60 for t, _ in s.rss], [k / 1024 for _, k in s.rss], lw=1)
    ax1.axvline(warmup / 60, color="red", ls="--", label=f"end of warm-up ({warmup:.0f} s)")
    ax1.set_ylabel("server RSS (MiB)")
    ax1.set_ylim(bottom=0)
    ax1.legend(loc="lower right")
    ax1.set_title(f"kvmem soak: {s.args.clients} clients, {s.args.agents} agents, "
                  f"--hot-mib {s.args.hot_mib}, {s.duration / 60:.0f} min")
    for kind, color in zip(KINDS, ["C0", "C1", "C2", "C3"]):
        pts = [(r["t"] / 60, r["ttft"] * 1000) for r in s.records
               if r["kind"] == kind and "ttft" in r and r["status"] == 200]
        ax2.scatter([p[0] for p in pts], [p[1] for p in pts], s=2, color=color, label=kind)
    ax2.axvline(warmup / 60, color="red", ls="--")
    ax2.set_yscale("log")
    ax2.set_ylabel("TTFT (ms; non-streamed: whole reply)")
    ax2.set_xlabel("minutes")
    ax2.legend(loc="upper right", markerscale=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--hot-mib", type=int, default=24,
                   help="the server's hot tier: a few agents' caches, so the rest move to disk")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--disconnect-frac", type=float, default=0.1,
                   help="share of streamed requests dropped after their first token")
    p.add_argument("--warmup-frac", type=float, default=0.1)
    p.add_argument("--warmup-min-s", type=float, default=60)
    p.add_argument("--rss-every", type=float, default=2)
    p.add_argument("--progress-every", type=float, default=30)
    p.add_argument("--timeout", type=float, default=120, help="per request, seconds")
    p.add_argument("--max-drift-pct", type=float, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bin", default=BIN)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--json", help="write the report here (else stdout)")
    p.add_argument("--png", help="plot RSS and TTFT over time here")
    p.add_argument("--check", action="store_true",
                   help="exit 1 on any unexpected error, a dead server or RSS drift past the bound")
    args = p.parse_args()
    s = Soak(args)
    s.run()
    out, warmup = report(s)
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if args.png:
        plot(s, warmup, args.png)
    summary = (f"{out['requests']} requests in {out['duration_s']:.0f} s {out['by_status']}; "
               f"unexpected errors {out['unexpected_errors']}; TTFT p99 (all) "
               f"{out['ttft']['all']['p99_ms']} ms; RSS {out['rss']}")
    print(summary, file=sys.stderr)
    if args.check:
        bad = []
        if out["unexpected_errors"]:
            bad.append(f"{out['unexpected_errors']} unexpected errors: {out['errors'][:5]}")
        if not s.alive:
            bad.append("the server died:\n" + s.server_log[-3000:])
        if out["damaged_cache_logs"]:
            bad.append(f"{out['damaged_cache_logs']} damaged caches logged")
        r = out["rss"]
        if "drift_max_pct" not in r:
            bad.append("too few RSS samples")
        elif max(abs(r["drift_max_pct"]), abs(r["drift_min_pct"])) > args.max_drift_pct:
            bad.append(f"RSS drift past {args.max_drift_pct}%: {r}")
        if bad:
            print("SOAK FAILED: " + "\n".join(bad), file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
