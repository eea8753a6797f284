"""Crash safety of the agent store: RUNS times (default 200, $KVMEM_CRASH_RUNS), a server is
started on the same store, one agent's turn is streamed, and the server is killed with SIGKILL
at a random moment around the end of the turn — when the reply's last tokens have been sent and
the cache is being saved (the save runs before the stream's final event). The test keeps its own
log of acknowledged turns (streams that reached [DONE]). Every restart must load every agent's
acknowledged conversation intact: the next turn of that agent reuses at least the acknowledged
prompt and reply from the cache, and the server never reports a damaged cache (an unacknowledged
save may or may not have landed, but never loads corrupt)."""
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
AGENTS = ["crash-a", "crash-b", "crash-c"]


def stream_turn(url, agent, msgs, first_delta, result):
    """Streams one chat turn; sets first_delta at the first content; result['usage'] and
    result['text'] when [DONE] arrives (= acknowledged)."""
    body = json.dumps({"model": "kvmem", "messages": msgs, "max_tokens": 3, "temperature": 0,
                       "user": agent, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    text, usage = [], None
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
                        result.setdefault("first_at", time.perf_counter())
                        first_delta.set()
    except Exception as e:  # the server was killed mid-stream
        result["error"] = repr(e)
    first_delta.set()


class CrashTest(unittest.TestCase):
    def test_kill_during_saves(self):
        server_util.skip_without_model()
        rng = random.Random(12345)
        acked = {a: {"msgs": [], "tokens": 0, "turns": 0} for a in AGENTS}
        hits = 0
        tails = []     # seconds from the first streamed token to [DONE], acknowledged turns
        mid_write = 0  # kills that left a temp file behind: the save was being written
        landed = 0     # unacknowledged turns whose save had completed
        with tempfile.TemporaryDirectory() as store:
            for run in range(RUNS):
                srv = server_util.Server(store)
                agent = rng.choice(AGENTS)
                log = acked[agent]
                msgs = log["msgs"] + [{"role": "user",
                                       "content": f"Note {log['turns']}: item {rng.randint(0, 999)}."}]
                first, result = threading.Event(), {}
                t = threading.Thread(target=stream_turn, args=(srv.url, agent, msgs, first, result))
                t.start()
                first.wait(60)
                # The save runs just before [DONE]: aim around the end of the turn, as measured
                # from first delta to [DONE] on the acknowledged turns so far.
                tail = statistics.median(tails) if tails else 0.2
                time.sleep(rng.uniform(0.5, 1.5) * tail)
                srv.kill()
                t.join()
                if glob.glob(os.path.join(store, "*", "*", ".kvmem-tmp.*")):
                    mid_write += 1
                err = srv.stderr()
                self.assertNotIn("stored cache not used", err, f"run {run}: {err[-2000:]}")
                if "usage" in result:
                    tails.append(result["done_at"] - result["first_at"])
                    usage = result["usage"]
                    # The reused prefix covers the acknowledged conversation so far (more when
                    # an unacknowledged save had landed).
                    cached = usage["prompt_tokens_details"]["cached_tokens"]
                    self.assertGreaterEqual(cached, log["tokens"], f"run {run}")
                    landed += cached > log["tokens"] + 8
                    log["msgs"] = msgs + [{"role": "assistant", "content": result["text"]}]
                    log["tokens"] = usage["prompt_tokens"] + usage["completion_tokens"] - 1
                    log["turns"] += 1
                else:
                    hits += 1  # killed before the acknowledgement: maybe during the save
                srv.stop()
            # Finally every agent's acknowledged conversation loads intact.
            with server_util.Server(store) as srv:
                for agent, log in acked.items():
                    if not log["turns"]:
                        continue
                    msgs = log["msgs"] + [{"role": "user", "content": "Done."}]
                    first, result = threading.Event(), {}
                    stream_turn(srv.url, agent, msgs, first, result)
                    self.assertIn("usage", result, result)
                    self.assertGreaterEqual(result["usage"]["prompt_tokens_details"]["cached_tokens"],
                                            log["tokens"], agent)
                self.assertNotIn("stored cache not used", srv.stderr())
        turns = sum(a["turns"] for a in acked.values())
        print(f"{RUNS} kills: {turns} turns acknowledged, {hits} killed before the "
              f"acknowledgement, {mid_write} while a file of the save was being written, "
              f"{landed} unacknowledged saves found complete by the next turn")
        self.assertGreater(turns, RUNS // 10)
        self.assertGreater(hits, RUNS // 10)
        self.assertGreater(mid_write, 0)  # some kills did land inside a save


if __name__ == "__main__":
    unittest.main(verbosity=2)
