"""Crash safety of the agent store: RUNS times (default 200, $KVMEM_CRASH_RUNS; `scripts/test.sh
--long` runs 1000), a server is started on the same store with two tenants (`--api-key
KEY:TENANT`), one turn of one of three agents is streamed, and the server is killed with SIGKILL
at a random moment of that turn. The agents are "crash-a" and "crash-b" of tenant A and "crash-a"
of tenant B (the same id in two tenants: two agents that must never mix). Two kills in five fall
anywhere from the request to a little past its expected end (while the agent's cache loads and
the prompt is computed, mid-reply, during the save, after the acknowledgement); two in five aim
at the save, between the reply's last token and the stream's final event (the save runs before
it); one in five comes after the acknowledgement.

The test keeps its own log of acknowledged turns (streams that reached [DONE]). Every restart must
load every agent's acknowledged conversation intact: the next turn of that agent reuses at least
the acknowledged prompt and reply from the cache, and the server never reports a damaged cache
(an unacknowledged save may or may not have landed, but never loads corrupt). A conversation
nearing the context starts afresh (the old one stays behind as a checkpoint)."""
import glob
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

RUNS = int(os.environ.get("KVMEM_CRASH_RUNS", "200"))
KEYS = {"tenant-a": "crash-key-a", "tenant-b": "crash-key-b"}
AGENTS = [("tenant-a", "crash-a"), ("tenant-a", "crash-b"), ("tenant-b", "crash-a")]
SERVER_FLAGS = [f for tenant, key in KEYS.items() for f in ("--api-key", f"{key}:{tenant}")]
RESTART_TOKENS = 3000  # of the 4096-token context: a conversation past this starts afresh


def recent_median(xs, default):
    return statistics.median(xs[-20:]) if xs else default


def stream_turn(url, key, agent, msgs, max_tokens, last_delta, result):
    """Streams one chat turn; counts result['deltas'] and sets last_delta at the max_tokens-th
    (or when the stream ends); result['usage'] and result['text'] when [DONE] arrives
    (= acknowledged)."""
    body = json.dumps({"model": "kvmem", "messages": msgs, "max_tokens": max_tokens,
                       "temperature": 0, "user": agent, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {key}"})
    text, usage = [], None
    result["deltas"] = 0
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    result["text"], result["usage"] = "".join(text), usage
                    result["done_at"] = time.perf_counter()
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for c in chunk.get("choices", []):
                    if c["delta"].get("content"):
                        text.append(c["delta"]["content"])
                        result["deltas"] += 1
                        result["last_at"] = time.perf_counter()
                        result.setdefault("first_at", result["last_at"])
                        if result["deltas"] >= max_tokens:
                            last_delta.set()
    except Exception as e:  # the server was killed mid-stream
        result["error"] = repr(e)
    last_delta.set()


class CrashTest(unittest.TestCase):
    def test_kill_at_random_moments_of_turns(self):
        server_util.skip_without_model()
        started = time.time()
        rng = random.Random(12345)
        acked = {a: {"msgs": [], "tokens": 0, "turns": 0, "conv_turns": 0} for a in AGENTS}
        # Timings of the acknowledged turns, seconds: first streamed token to [DONE], request to
        # [DONE], last token to [DONE] (the save, for replies that ran to max_tokens).
        tails, totals, saves = [], [], []
        # Where each kill fell, as the client saw it: before the first token (the cache loading,
        # the prompt computed), mid-reply (tokens streaming; a reply that ended early on its own
        # counts here too), during the save (a temporary file of the save on disk, or every
        # token asked for received without [DONE]), after the acknowledgement.
        points = {"prefill": 0, "mid_reply": 0, "save": 0, "after_ack": 0}
        mid_write = 0  # kills that left a temp file behind: the save was being written
        landed = 0     # unacknowledged turns whose save had completed
        checks = 0     # acknowledged conversations checked against the next turn's cache
        restarts = 0
        with tempfile.TemporaryDirectory() as store:
            for run in range(RUNS):
                srv = server_util.Server(store, extra=SERVER_FLAGS)
                tenant, agent = rng.choice(AGENTS)
                log = acked[(tenant, agent)]
                if log["tokens"] > RESTART_TOKENS:
                    log.update(msgs=[], tokens=0, conv_turns=0)
                    restarts += 1
                msgs = log["msgs"] + [{"role": "user",
                                       "content": f"Note {log['turns']}: item {rng.randint(0, 999)}."}]
                max_tokens = rng.randint(3, 8)
                last, result = threading.Event(), {}
                t = threading.Thread(target=stream_turn, args=(srv.url, KEYS[tenant], agent, msgs,
                                                                max_tokens, last, result))
                sent = time.perf_counter()
                t.start()
                mode = rng.random()
                if mode < 0.4:
                    # Anywhere in the turn: from the request to a little past its usual end.
                    time.sleep(rng.uniform(0, 1.2) * recent_median(totals, 1.0))
                elif mode < 0.8:
                    # Around the save, which runs between the last token and [DONE]: after the
                    # last token asked for (or, for a reply that ends early, about when the
                    # last one comes), within 1.5 times the usual save.
                    last.wait(1.5 * recent_median(totals, 1.0))
                    time.sleep(rng.uniform(0, 1.5) * recent_median(saves, 0.05))
                else:
                    # After the acknowledgement: the turn completes, then the server dies idle.
                    # These turns keep the acknowledged conversations growing and the timings
                    # above measured on this machine.
                    t.join(60)
                srv.kill()
                t.join()
                writing = bool(glob.glob(os.path.join(store, "*", "*", ".kvmem-tmp.*")))
                mid_write += writing
                err = srv.stderr()
                self.assertNotIn("stored cache not used", err, f"run {run}: {err[-2000:]}")
                if "usage" in result:
                    points["after_ack"] += 1
                    tails.append(result["done_at"] - result["first_at"])
                    totals.append(result["done_at"] - sent)
                    if result["deltas"] >= max_tokens:
                        saves.append(result["done_at"] - result["last_at"])
                    usage = result["usage"]
                    # The reused prefix covers the acknowledged conversation so far (more when
                    # an unacknowledged save had landed).
                    cached = usage["prompt_tokens_details"]["cached_tokens"]
                    self.assertGreaterEqual(cached, log["tokens"], f"run {run} {tenant}/{agent}")
                    checks += log["conv_turns"] > 0
                    landed += log["conv_turns"] > 0 and cached > log["tokens"] + 8
                    log["msgs"] = msgs + [{"role": "assistant", "content": result["text"]}]
                    log["tokens"] = usage["prompt_tokens"] + usage["completion_tokens"] - 1
                    log["turns"] += 1
                    log["conv_turns"] += 1
                elif result["deltas"] == 0:
                    points["prefill"] += 1
                elif writing or result["deltas"] >= max_tokens:
                    points["save"] += 1
                else:
                    points["mid_reply"] += 1
                srv.stop()
            # Finally every agent's acknowledged conversation loads intact.
            with server_util.Server(store, extra=SERVER_FLAGS) as srv:
                for (tenant, agent), log in acked.items():
                    if not log["conv_turns"]:
                        continue
                    msgs = log["msgs"] + [{"role": "user", "content": "Done."}]
                    first, result = threading.Event(), {}
                    stream_turn(srv.url, KEYS[tenant], agent, msgs, 3, first, result)
                    self.assertIn("usage", result, result)
                    self.assertGreaterEqual(result["usage"]["prompt_tokens_details"]["cached_tokens"],
                                            log["tokens"], f"{tenant}/{agent}")
                    checks += 1
                self.assertNotIn("stored cache not used", srv.stderr())
        turns = sum(a["turns"] for a in acked.values())
        killed = RUNS - points["after_ack"]
        print(f"{RUNS} kills in {time.time() - started:.0f} s over {len(AGENTS)} agents in "
              f"{len(KEYS)} tenants: kill points {points}; {turns} turns acknowledged, "
              f"{checks} acknowledged conversations checked against the next turn's cache, "
              f"0 lost, 0 damaged caches served; {killed} turns killed before the "
              f"acknowledgement, {mid_write} while a file of the save was being written, "
              f"{landed} unacknowledged saves found complete by the next turn; {restarts} "
              f"conversations restarted near the context")
        self.assertGreater(turns, RUNS // 10)
        for point, n in points.items():
            self.assertGreater(n, RUNS // 50, f"too few kills {point}: {points}")
        self.assertGreater(mid_write, 0)  # some kills did land inside a save


if __name__ == "__main__":
    unittest.main(verbosity=2)
