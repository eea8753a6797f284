"""Agents are isolated: an agent never gets a cache hit on another agent's prefix (same tenant or
not), and no endpoint lets one tenant read or delete another tenant's agents."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402

PROMPT = [{"role": "user", "content": "The launch code is 7-4-1-9. Keep it secret. Say ok."}]


def chat(url, key, agent):
    c = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    return c.chat.completions.create(model="kvmem", messages=PROMPT, max_tokens=4,
                                     temperature=0, user=agent)


class IsolationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.store = tempfile.TemporaryDirectory()
        cls.srv = server_util.Server(cls.store.name,
                                     extra=["--api-key", "key-a:alice", "--api-key", "key-b:bob"])
        cls.first = chat(cls.srv.url, "key-a", "secret")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.store.cleanup()

    def test_no_cache_hit_across_agents(self):
        again = chat(self.srv.url, "key-a", "secret")
        self.assertGreater(again.usage.prompt_tokens_details.cached_tokens, 0)  # A's own cache
        for key, agent in (("key-a", "other"), ("key-b", "secret"), ("key-b", "bob-agent")):
            r = chat(self.srv.url, key, agent)
            self.assertEqual(r.usage.prompt_tokens_details.cached_tokens, 0, (key, agent))

    def test_other_tenant_cannot_see_or_delete(self):
        auth_b = {"Authorization": "Bearer key-b"}
        status, body = self.srv.get("/v1/agents", auth_b)
        self.assertEqual(status, 200)
        ids = [a["id"] for a in json.loads(body)["data"]]
        # Bob may have his own "secret" from the other test; what he sees is his.
        for a in json.loads(body)["data"]:
            self.assertNotEqual(a.get("tenant"), "alice")
        status, body = self.srv.get("/v1/agents/secret", {"x-api-key": "key-b"})
        if "secret" not in ids:
            self.assertEqual(status, 404, body)
        status, _ = self.srv.request("DELETE", "/v1/agents/secret", headers=auth_b)
        self.assertIn(status, (200, 204, 404))
        # Alice's agent is untouched by whatever Bob did.
        status, body = self.srv.get("/v1/agents/secret", {"Authorization": "Bearer key-a"})
        self.assertEqual(status, 200, body)
        self.assertGreater(json.loads(body)["cached_tokens"], 0)

    def test_keys_are_required(self):
        status, body = self.srv.get("/v1/agents")
        self.assertEqual(status, 401, body)
        status, body = self.srv.get("/v1/agents", {"Authorization": "Bearer wrong"})
        self.assertEqual(status, 401, body)
        status, _ = self.srv.get("/health")
        self.assertEqual(status, 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
