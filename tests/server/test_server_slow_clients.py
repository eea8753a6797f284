"""Slow and hostile clients against the real server (serve/http_front.h): 500 connections that
each send a POST's headers and one byte of its body, then stall, while a real client asks for
/health and a non-streamed and a streamed chat completion. All three must be answered at once
and the stalled connections must still be open meanwhile (so they were really held, not
dropped), then each gets 408 at --request-timeout.

With the default --max-client-connections (64) and the stalled connections from another
address (127.0.0.2), the 65th and later are refused at once with 503 and the real client is
served all the same.

On a server that gives each connection a thread (kvmem before http_front.h), /health times out.
The test prints the time /health took (docs/reliability.md, "Slow and hostile clients");
KVMEM_SERVE_EXTRA replaces the server flags, e.g. empty to run it against an older binary.
"""
import os
import select
import socket
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402

STALLED = 500
REQUEST_TIMEOUT_S = 8
# Every test connection comes from 127.0.0.1, so the per-client limit is raised past them.
FLAGS = os.environ.get("KVMEM_SERVE_EXTRA",
                       f"--max-client-connections 1000 --request-timeout {REQUEST_TIMEOUT_S}")
STALLED_POST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")


def stall(port, n, source="127.0.0.1"):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
        s.sendall(STALLED_POST)
        socks.append(s)
    return socks


def still_open(s):
    try:
        return s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True  # nothing to read and not closed
    except OSError:
        return False


def read_answers(socks, deadline):
    """The first bytes each socket receives, by socket; those unanswered by `deadline` left out."""
    answers = {}
    pending = {s.fileno(): s for s in socks}
    while pending and time.monotonic() < deadline:
        ready, _, _ = select.select(list(pending), [], [], 0.5)
        for fd in ready:
            s = pending.pop(fd)
            answers[s] = s.recv(4096)
    return answers


class SlowClientsTest(unittest.TestCase):
    def setUp(self):
        server_util.skip_without_model()
        self.store = tempfile.TemporaryDirectory()
        self.server = None

    def tearDown(self):
        if self.server:
            self.server.stop()
        self.store.cleanup()

    def chat_both_ways(self):
        client = openai.OpenAI(base_url=self.server.url + "/v1", api_key="unused",
                               max_retries=0, timeout=30)
        messages = [{"role": "user", "content": "Say hello."}]
        whole = client.chat.completions.create(model="kvmem", messages=messages,
                                               max_tokens=8, temperature=0)
        text = whole.choices[0].message.content
        self.assertTrue(text)
        stream = client.chat.completions.create(model="kvmem", messages=messages,
                                                max_tokens=8, temperature=0, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        self.assertEqual(streamed, text)  # greedy: the same reply either way

    def test_stalled_connections_do_not_stop_a_real_client(self):
        self.server = server_util.Server(self.store.name, extra=FLAGS.split())
        socks = stall(self.server.port, STALLED)
        stalled_at = time.monotonic()
        try:
            time.sleep(0.5)  # the server has taken them all
            start = time.monotonic()
            with urllib.request.urlopen(self.server.url + "/health", timeout=10) as r:
                self.assertEqual(r.status, 200)
            health_s = time.monotonic() - start
            print(f"/health with {STALLED} stalled connections: {health_s * 1000:.1f} ms")
            self.assertLess(health_s, 2.0)

            self.chat_both_ways()

            # The stalled connections were held all along, not dropped to make room.
            self.assertLess(time.monotonic() - stalled_at, REQUEST_TIMEOUT_S,
                            "too slow to tell held connections from dropped ones")
            self.assertEqual(sum(still_open(s) for s in socks), STALLED)

            # At the request deadline each gets 408 and is closed.
            answers = read_answers(socks, stalled_at + REQUEST_TIMEOUT_S + 10)
            self.assertEqual(sum(a.startswith(b"HTTP/1.1 408 ") for a in answers.values()),
                             STALLED)
            self.assertGreaterEqual(time.monotonic() - stalled_at, REQUEST_TIMEOUT_S - 0.5)
        finally:
            for s in socks:
                s.close()

    def test_connections_beyond_the_client_limit_get_503(self):
        if "KVMEM_SERVE_EXTRA" in os.environ:
            self.skipTest("needs --max-client-connections")
        self.server = server_util.Server(self.store.name, extra=["--request-timeout", "30"])
        socks = stall(self.server.port, STALLED, source="127.0.0.2")
        try:
            answers = read_answers(socks, time.monotonic() + 5)
            refused = [a for a in answers.values() if a.startswith(b"HTTP/1.1 503 ")]
            self.assertEqual(len(refused), STALLED - 64)
            self.assertEqual(len(answers), STALLED - 64)  # the other 64 are held, unanswered
            self.assertIn(b"\r\nRetry-After: 1\r\n", refused[0])
            self.assertIn(b'"type":"server_error"', refused[0])
            # The real client, from 127.0.0.1, has its own 64.
            start = time.monotonic()
            with urllib.request.urlopen(self.server.url + "/health", timeout=10) as r:
                self.assertEqual(r.status, 200)
            self.assertLess(time.monotonic() - start, 2.0)
            self.chat_both_ways()
        finally:
            for s in socks:
                s.close()


if __name__ == "__main__":
    unittest.main()
