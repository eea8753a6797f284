"""Two kvmem servers share agents through one Redis (`--store redis://...`).

A redis-server (append-only, fsync always) is started here on a free loopback port, and two
kvmem servers on it. One agent's turns alternate between the servers: every turn after the
first reuses the whole previous turn from the other server's save (`cached_tokens` covers the
previous prompt and reply), and every greedy reply equals that of one server on a local store
(the reference: the same conversation, never shared). Then the faults: a server killed with
SIGKILL mid-turn (the next turn, on the other server, waits out the dead server's lease and
continues from the last acknowledged turn), Redis killed with SIGKILL and started again (nothing
acknowledged is lost), and Redis down (a turn that carries its conversation is answered from
the prompt alone, with a log line, never a wrong answer or a hang; an agent the server does not
know, which may hold a server-side conversation, is refused with 503).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402

TURNS = ["Hi! My dog is called Biscuit and she loves the beach.",
         "What should I pack for a beach day with her?",
         "She also likes chasing crabs. Is that safe?",
         "Remind me, what is my dog's name?",
         "And where does she like to go?",
         "Thanks. Anything else I should know?"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvmem-redis-")
        self.port = free_port()
        self.proc = None
        self.start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--logfile", os.path.join(self.dir, "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def chat(url, msgs, agent, max_tokens=16):
    c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    return c.chat.completions.create(model="kvmem", messages=msgs, max_tokens=max_tokens,
                                     temperature=0, user=agent)


def stream_until_killed(url, agent, msgs, first_delta):
    """A streamed turn whose server dies under it; sets first_delta at its first token."""
    body = json.dumps({"model": "kvmem", "messages": msgs, "max_tokens": 400, "temperature": 0,
                       "user": agent, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                if line.startswith(b"data: {"):
                    first_delta.set()
    except Exception:
        pass
    first_delta.set()


class TwoServersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is missing: scripts/install_deps.sh installs it")

    def setUp(self):
        self.redis = Redis()
        # Each server's local block cache (--store-cache), as on two machines.
        self.cache_dirs = [tempfile.TemporaryDirectory(), tempfile.TemporaryDirectory()]
        self.servers = [self.start(0), self.start(1)]
        self.ref_dir = tempfile.TemporaryDirectory()
        self.ref = server_util.Server(self.ref_dir.name)

    def tearDown(self):
        for s in self.servers + [self.ref]:
            s.stop()
        self.redis.close()
        self.ref_dir.cleanup()
        for d in self.cache_dirs:
            d.cleanup()

    def start(self, i, extra=()):
        return server_util.Server(self.redis.url,
                                  extra=["--store-cache", self.cache_dirs[i].name, *extra])

    def turn(self, srv, msgs, text, agent="shared"):
        """One turn on srv and the same on the reference; returns the usage."""
        msgs.append({"role": "user", "content": text})
        r = chat(srv.url, msgs, agent)
        want = chat(self.ref.url, msgs, agent)
        self.assertEqual(r.choices[0].message.content, want.choices[0].message.content,
                         f"turn {text!r}")
        msgs.append({"role": "assistant", "content": r.choices[0].message.content})
        return r.usage

    def expect_reused(self, usage, prev):
        cached = usage.prompt_tokens_details.cached_tokens
        # The previous prompt and reply (all but its last sampled token, never fed back).
        self.assertGreaterEqual(cached, prev.prompt_tokens + prev.completion_tokens - 1)

    def test_turns_alternate_between_servers_and_reuse_each_others_cache(self):
        a, b = self.servers
        msgs = []
        prev = self.turn(a, msgs, TURNS[0])
        for i, text in enumerate(TURNS[1:4]):
            usage = self.turn(self.servers[(i + 1) % 2], msgs, text)
            self.expect_reused(usage, prev)
            prev = usage
        # Both servers list it; a delete on one is seen by the other.
        for s in (a, b):
            status, body = s.get("/v1/agents/shared")
            self.assertEqual(status, 200, body)
        self.assertEqual(b.request("DELETE", "/v1/agents/shared")[0], 200)
        self.assertEqual(a.get("/v1/agents/shared")[0], 404)
        # A tenant's agent is its own: another tenant's server sees none of it (same Redis).
        c = self.start(0, extra=["--api-key", "k2:other"])
        try:
            status, body = c.request("GET", "/v1/agents", headers={"Authorization": "Bearer k2"})
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["data"], [])
        finally:
            c.stop()

    def test_a_server_killed_mid_turn_loses_nothing_acknowledged(self):
        a, b = self.servers
        msgs = []
        prev = self.turn(a, msgs, TURNS[0])
        prev = self.turn(b, msgs, TURNS[1])
        # Killed mid-turn, holding the agent's lease: the turn was never acknowledged.
        first = threading.Event()
        t = threading.Thread(target=stream_until_killed,
                             args=(a.url, "shared", msgs + [{"role": "user", "content": TURNS[2]}],
                                   first))
        t.start()
        self.assertTrue(first.wait(60))
        a.kill()
        a.stop()
        t.join()
        # The other server waits out the lease, then continues from the last acknowledged turn.
        t0 = time.time()
        usage = self.turn(b, msgs, TURNS[3])
        self.expect_reused(usage, prev)
        self.assertLess(time.time() - t0, 40 * server_util.TIME_SCALE)
        self.servers[0] = self.start(0)
        self.expect_reused(self.turn(self.servers[0], msgs, TURNS[4]), usage)

    def test_a_redis_that_stops_answering(self):
        # SIGSTOP: connections are still accepted, but no reply comes; every call times out.
        a, b = self.servers
        msgs = []
        prev = self.turn(a, msgs, TURNS[0])
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.time()
            slow = self.turn(a, list(msgs), TURNS[1])
            took = time.time() - t0
            print(f"a turn with Redis stopped: {took:.1f} s (its reference's included)",
                  file=sys.stderr)
            self.assertLess(took, 30 * server_util.TIME_SCALE)
            self.assertEqual(slow.prompt_tokens_details.cached_tokens, 0)
            self.assertIn("store cannot be reached", a.stderr())
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        # Answering again: the other server continues from the last acknowledged turn.
        self.expect_reused(self.turn(b, msgs, TURNS[1]), prev)

    def test_redis_killed_and_down(self):
        a, b = self.servers
        msgs = []
        prev = self.turn(a, msgs, TURNS[0])
        prev = self.turn(b, msgs, TURNS[1])
        self.redis.kill()
        # Down: answered from the prompt alone (nothing cached, nothing saved), with a log line.
        t0 = time.time()
        down = self.turn(a, list(msgs), TURNS[2])
        self.assertLess(time.time() - t0, 60 * server_util.TIME_SCALE)
        self.assertEqual(down.prompt_tokens_details.cached_tokens, 0)
        self.assertIn("store cannot be reached", a.stderr())
        # An agent this server has never seen may hold a server-side conversation: 503, at once.
        t0 = time.time()
        status, body = a.post_json("/v1/chat/completions", {
            "model": "kvmem", "user": "stranger", "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hello"}]})
        self.assertEqual(status, 503, body)
        self.assertLess(time.time() - t0, 10 * server_util.TIME_SCALE)
        # Back (its append-only file replayed): every acknowledged turn is there.
        self.redis.start()
        usage = self.turn(a, msgs, TURNS[3])
        self.expect_reused(usage, prev)
        self.expect_reused(self.turn(b, msgs, TURNS[4]), usage)


if __name__ == "__main__":
    unittest.main()
