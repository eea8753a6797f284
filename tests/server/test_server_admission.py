"""Admission and cancellation with a real `kvmem serve` (SmolLM2):

- a client that hangs up mid-generation, whole reply or stream, stops its generation at once
  (the in-flight count drops within a moment, far before max_tokens), and the agent keeps
  nothing of that turn: its memory is what it was before, and the next turn reuses it;
- --max-running N --max-queue M: of N+M+1 requests at once exactly one is refused, 429 with
  OpenAI's rate-limit error or 529 overloaded_error, both with Retry-After; the queued ones run;
- queued requests take turns by tenant: tenant B's one request is not kept behind tenant A's
  many agents.

The long generations continue a count ("1, 2, 3, ...") greedily, which SmolLM2 keeps doing
for thousands of tokens."""
import http.client
import json
import os
import re
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

COUNT = "Numbers: " + ", ".join(str(i) for i in range(1, 21)) + ","


def metric(server, name, labels=""):
    key = getattr(server, "key", None)  # servers started with --api-key need one
    status, text = server.get("/metrics", {"x-api-key": key} if key else None)
    assert status == 200, text
    m = re.search(r"^" + re.escape(name + (("{" + labels + "}") if labels else "")) +
                  r" ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def wait_for(cond, timeout=30.0, step=0.02):
    deadline = time.time() + timeout * server_util.TIME_SCALE
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def raw_request(server, path, body, headers=None):
    """Sends a POST on a connection of its own and returns it without reading the reply."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port,
                                      timeout=60 * server_util.TIME_SCALE)
    conn.request("POST", path, json.dumps(body),
                 {"Content-Type": "application/json", **(headers or {})})
    return conn


class CancellationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.store = tempfile.TemporaryDirectory()
        cls.server = server_util.Server(cls.store.name)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.store.cleanup()

    def agent_tokens(self, agent):
        status, text = self.server.get("/v1/agents/" + agent)
        self.assertEqual(status, 200, text)
        return json.loads(text)["cached_tokens"]

    def hang_up_mid_generation(self, agent, prompt, stream):
        s = self.server
        cancelled = metric(s, "kvmem_generations_finished_total", 'reason="cancelled"')
        generated = metric(s, "kvmem_generation_tokens_total")
        conn = raw_request(s, "/v1/completions",
                           {"model": "m", "prompt": prompt, "max_tokens": 3000,
                            "temperature": 0, "stream": stream},
                           {"X-Agent-Id": agent})
        if stream:
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            resp.fp.readline()  # the first event has begun: the reply is being generated
        self.assertTrue(wait_for(lambda: metric(s, "kvmem_requests_running") == 1))
        time.sleep(0.5)
        conn.sock.close()  # hang up
        conn.close()
        t0 = time.time()
        self.assertTrue(wait_for(lambda: metric(s, "kvmem_requests_in_flight") == 0, timeout=10))
        gone_after = time.time() - t0
        # 3000 tokens take tens of seconds here; the generation stopped at its next token (the
        # bound is loose for a loaded machine).
        self.assertLess(gone_after, 3.0 * server_util.TIME_SCALE)
        self.assertEqual(metric(s, "kvmem_requests_running"), 0)
        self.assertEqual(
            metric(s, "kvmem_generations_finished_total", 'reason="cancelled"'), cancelled + 1)
        self.assertLess(metric(s, "kvmem_generation_tokens_total") - generated, 1500)

    def test_hang_up_keeps_nothing_of_the_turn(self):
        for stream in (False, True):
            agent = "cancel-stream" if stream else "cancel-whole"
            status, first = self.server.post_json(
                "/v1/completions", {"model": "m", "prompt": COUNT, "max_tokens": 4,
                                    "temperature": 0}, {"X-Agent-Id": agent})
            self.assertEqual(status, 200, first)
            before = self.agent_tokens(agent)
            self.assertGreater(before, 0)
            history = COUNT + first["choices"][0]["text"]

            longer = history + " and on: " + COUNT
            self.hang_up_mid_generation(agent, longer, stream)
            # Neither the prompt's new rows nor the partial reply were kept.
            self.assertEqual(self.agent_tokens(agent), before, f"stream={stream}")

            # The next turn continues the memory as it was.
            status, again = self.server.post_json(
                "/v1/completions", {"model": "m", "prompt": longer, "max_tokens": 4,
                                    "temperature": 0}, {"X-Agent-Id": agent})
            self.assertEqual(status, 200, again)
            cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
            self.assertGreaterEqual(cached, before - 2, f"stream={stream}")
            self.assertGreater(self.agent_tokens(agent), before)


class AdmissionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.store = tempfile.TemporaryDirectory()
        cls.server = server_util.Server(
            cls.store.name, extra=["--max-running", "2", "--max-queue", "1",
                                   "--api-key", "ka:A", "--api-key", "kb:B"])
        cls.server.key = "ka"

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.store.cleanup()

    def concurrent(self, path, bodies, headers):
        """Sends every body at once; [(status, body text, headers)] in the order given."""
        out = [None] * len(bodies)

        def run(i):
            out[i] = self.server.request("POST", path, json.dumps(bodies[i]), headers[i],
                                         with_headers=True)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def test_overflow_is_refused_per_dialect(self):
        refused = metric(self.server, "kvmem_requests_refused_total")
        for path in ("/v1/completions", "/v1/messages"):
            anthropic = path == "/v1/messages"
            if anthropic:
                body = {"model": "m", "max_tokens": 96, "temperature": 0,
                        "messages": [{"role": "user", "content": COUNT}]}
            else:
                body = {"model": "m", "prompt": COUNT, "max_tokens": 96, "temperature": 0}
            headers = [{"Content-Type": "application/json", "x-api-key": "ka",
                        "X-Agent-Id": f"load-{i}"} for i in range(4)]  # N + M + 1 agents
            replies = self.concurrent(path, [body] * 4, headers)
            statuses = sorted(r[0] for r in replies)
            self.assertEqual(statuses, [200, 200, 200, 529 if anthropic else 429],
                             [r[:2] for r in replies])
            (status, text, hdrs), = [r for r in replies if r[0] != 200]
            self.assertEqual(hdrs["Retry-After"], "1")
            err = json.loads(text)
            if anthropic:
                self.assertEqual(err["type"], "error")
                self.assertEqual(err["error"]["type"], "overloaded_error")
            else:
                self.assertEqual(err["error"]["type"], "requests")
                self.assertEqual(err["error"]["code"], "rate_limit_exceeded")
            for status, text, _ in replies:  # the queued one ran too
                if status == 200:
                    usage = json.loads(text)["usage"]
                    self.assertGreater(usage["output_tokens" if anthropic
                                             else "completion_tokens"], 0)
        self.assertEqual(metric(self.server, "kvmem_requests_refused_total"), refused + 2)
        self.assertTrue(wait_for(lambda: metric(self.server, "kvmem_requests_in_flight") == 0))


class FairnessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.store = tempfile.TemporaryDirectory()
        cls.server = server_util.Server(
            cls.store.name, extra=["--max-running", "1", "--max-queue", "16",
                                   "--api-key", "ka:A", "--api-key", "kb:B"])
        cls.server.key = "ka"

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.store.cleanup()

    def test_one_tenant_cannot_starve_another(self):
        s = self.server
        done, lock, threads = [], threading.Lock(), []

        def send(key, agent, max_tokens):
            status, _ = s.post_json("/v1/completions",
                                    {"model": "m", "prompt": COUNT, "max_tokens": max_tokens,
                                     "temperature": 0},
                                    {"x-api-key": key, "X-Agent-Id": agent})
            with lock:
                done.append((agent, status))

        def start(*args):
            t = threading.Thread(target=send, args=args)
            t.start()
            threads.append(t)

        start("ka", "a0", 300)  # runs while the rest queue
        self.assertTrue(wait_for(lambda: metric(s, "kvmem_requests_running") == 1))
        for i in range(1, 9):  # A floods with eight agents
            start("ka", f"a{i}", 24)
            self.assertTrue(wait_for(lambda: metric(s, "kvmem_requests_queued") == i))
        start("kb", "b", 24)
        self.assertTrue(wait_for(lambda: metric(s, "kvmem_requests_queued") == 9))
        for t in threads:
            t.join()
        self.assertTrue(all(status == 200 for _, status in done), done)
        order = [agent for agent, _ in done]
        self.assertEqual(order[0], "a0", order)
        # B came last but is admitted next, before all eight of A's queued requests.
        self.assertEqual(order[1], "b", order)


if __name__ == "__main__":
    unittest.main()
