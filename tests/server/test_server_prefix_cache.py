"""Requests naming no agent share prompt prefixes through the tenant's radix prefix cache: the same
long system prompt sent twice without `user` reports cached tokens the second time, never for
another tenant (the API key decides the tenant), and /metrics counts the hits."""
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402

SYSTEM = "You are the archivist of a small museum. The catalogue follows.\n" + "".join(
    f"Drawer {i} holds {i * 7 % 23} letters written in {1850 + 3 * i}.\n" for i in range(40))


def ask(url, key, question, **kw):
    c = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    return c.chat.completions.create(
        model="kvmem", max_tokens=3, temperature=0,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        **kw)


def metric(text, name):
    m = re.search(r"^" + name + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


class PrefixCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.store = tempfile.TemporaryDirectory()
        cls.srv = server_util.Server(cls.store.name,
                                     extra=["--api-key", "key-a:alice", "--api-key", "key-b:bob",
                                            "--api-key", "key-c:carol"])

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.store.cleanup()

    def test_second_request_reads_the_prefix_of_its_own_tenant_only(self):
        first = ask(self.srv.url, "key-a", "How many letters are in drawer 3?")
        self.assertEqual(first.usage.prompt_tokens_details.cached_tokens, 0)
        second = ask(self.srv.url, "key-a", "Which year are the letters of drawer 30 from?")
        cached = second.usage.prompt_tokens_details.cached_tokens
        self.assertGreater(cached, 300)  # the system prompt
        self.assertLess(cached, second.usage.prompt_tokens)
        # The same prompt again: all but its last token.
        again = ask(self.srv.url, "key-a", "Which year are the letters of drawer 30 from?")
        self.assertEqual(again.usage.prompt_tokens_details.cached_tokens,
                         again.usage.prompt_tokens - 1)
        self.assertEqual(again.choices[0].message.content, second.choices[0].message.content)
        # Carol's identical prompt finds nothing of Alice's.
        bob = ask(self.srv.url, "key-c", "Which year are the letters of drawer 30 from?")
        self.assertEqual(bob.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertEqual(bob.choices[0].message.content, second.choices[0].message.content)
        # n > 1 on a hit.
        many = ask(self.srv.url, "key-a", "Which year are the letters of drawer 30 from?", n=2)
        self.assertEqual(len(many.choices), 2)
        self.assertGreater(many.usage.prompt_tokens_details.cached_tokens, 300)
        status, text = self.srv.get("/metrics", {"x-api-key": "key-a"})
        self.assertEqual(status, 200)
        self.assertGreater(metric(text, "kvmem_prefix_cache_hit_tokens_total"), 600)
        self.assertGreater(metric(text, "kvmem_prefix_cache_lookup_tokens_total"), 0)
        self.assertGreater(metric(text, "kvmem_prefix_cache_bytes"), 0)
        self.assertIsNotNone(metric(text, "kvmem_prefix_cache_evictions_total"))

    def test_an_agents_turn_is_not_served_from_the_anonymous_cache(self):
        ask(self.srv.url, "key-b", "Which drawer holds the oldest letters?")
        r = ask(self.srv.url, "key-b", "Which drawer holds the oldest letters?", user="fresh-agent")
        self.assertEqual(r.usage.prompt_tokens_details.cached_tokens, 0)


if __name__ == "__main__":
    unittest.main()
