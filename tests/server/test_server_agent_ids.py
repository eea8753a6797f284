"""Agent ids as clients send them: e-mail addresses, spaces, '/', non-ASCII and 256-byte ids work
in OpenAI's `user`, Anthropic's `metadata.user_id` and X-Agent-Id, are listed and addressed
(URL-encoded) as sent, and persist across a restart; two ids one byte apart are two agents;
hostile ids ('../x', '/etc', ...) are plain names that never reach the file system as paths,
and NUL or over 256 bytes are a 400."""
import json
import os
import re
import sys
import tempfile
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

CHAT = "/v1/chat/completions"

IDS = ["alice@example.com", "Ada Lovelace", "team/planner", "用户 🤗 café", "z" * 256]
HOSTILE = ["../x", "/etc", "..", ".", "../../../../tmp/kvmem-escape", "a/../../b", "..\\..\\x",
           "%2e%2e%2f", "~root", "-rf"]


def path_of(agent):
    return "/v1/agents/" + urllib.parse.quote(agent, safe="")


def chat(srv, agent, content, headers=None):
    body = {"model": "kvmem", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": content}]}
    if headers is None:
        body["user"] = agent
    status, reply = srv.post_json(CHAT, body, headers)
    assert status == 200, reply
    return reply["usage"]["prompt_tokens_details"]["cached_tokens"]


def prompt_for(agent):
    return f"Remember this for {agent!r}: the locker code is {len(agent) * 7 % 1000}. " * 8


def store_entries(store):
    """Every path under the store, relative to it."""
    out = []
    for root, dirs, files in os.walk(store):
        for name in dirs + files:
            out.append(os.path.relpath(os.path.join(root, name), store))
    return out


# What a store may hold: <model dir>/{.lock,name-secret,presets...,<agent dir>/{manifest,
# checkpoints,blocks}}.
SAFE = re.compile(r"^(presets(/.*)?|[0-9a-f]{16}(/(\.lock|name-secret|[0-9a-f]{32}"
                  r"(/(manifest\.json|ckpt-[1-9][0-9]*\.json|kv-[0-9a-f]{32}\.safetensors))?))?)$")


class AgentIdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.outer = tempfile.TemporaryDirectory()  # the store and nothing else lives here
        cls.store = os.path.join(cls.outer.name, "store")

    @classmethod
    def tearDownClass(cls):
        cls.outer.cleanup()

    def test_1_ids_clients_send_persist_across_a_restart(self):
        with server_util.Server(self.store) as srv:
            for agent in IDS:
                self.assertEqual(chat(srv, agent, prompt_for(agent)), 0, agent)
            # Anthropic's metadata.user_id and the X-Agent-Id header name the same agents.
            status, reply = srv.post_json("/v1/messages", {
                "model": "kvmem", "max_tokens": 4, "metadata": {"user_id": IDS[3]},
                "messages": [{"role": "user", "content": prompt_for(IDS[3])}]})
            self.assertEqual(status, 200, reply)
            self.assertGreater(reply["usage"]["cache_read_input_tokens"], 0)
            # Header values travel as bytes: UTF-8 sent as is.
            header = IDS[3].encode().decode("latin-1")
            self.assertGreater(chat(srv, IDS[3], prompt_for(IDS[3]), {"X-Agent-Id": header}), 0)
            self.assertGreater(chat(srv, IDS[2], prompt_for(IDS[2]), {"X-Agent-Id": IDS[2]}), 0)

            status, text = srv.get("/v1/agents")
            listed = [a["id"] for a in json.loads(text)["data"]]
            self.assertEqual(sorted(listed), sorted(IDS))
            for agent in IDS:
                status, text = srv.get(path_of(agent))
                self.assertEqual(status, 200, text)
                self.assertEqual(json.loads(text)["id"], agent)
        with server_util.Server(self.store) as srv:  # a restart: every agent reloads
            for agent in IDS:
                self.assertGreater(chat(srv, agent, prompt_for(agent)), 0, agent)
            status, text = srv.request("DELETE", path_of(IDS[1]))
            self.assertEqual((status, json.loads(text)["id"]), (200, IDS[1]), text)
            self.assertEqual(srv.get(path_of(IDS[1]))[0], 404)
        for entry in store_entries(self.store):
            self.assertRegex(entry, SAFE)

    def test_2_ids_one_byte_apart_are_two_agents(self):
        a, b = "bob@example.com", "bob@example.con"
        with server_util.Server(self.store) as srv:
            chat(srv, a, "Bob's first note: the sky is green. " * 10)
            chat(srv, b, "A different person entirely writes about boats. " * 10)
            # Each resend hits only its own agent's cache.
            # (Both share only the chat template's system turn, about 25 tokens.)
            self.assertGreater(chat(srv, a, "Bob's first note: the sky is green. " * 10), 80)
            self.assertLess(chat(srv, b, "Bob's first note: the sky is green. " * 10), 40)
            for agent in (a, b):
                status, text = srv.get(path_of(agent))
                self.assertEqual(json.loads(text)["id"], agent)

    def test_3_hostile_ids_never_touch_the_file_system(self):
        with server_util.Server(self.store) as srv:
            for agent in HOSTILE:
                chat(srv, agent, "hello from " + agent)
                status, text = srv.get(path_of(agent))
                self.assertEqual((status, json.loads(text)["id"]), (200, agent), text)
            for bad in ["nul\x00", "x" * 257, "bell\x07"]:
                status, reply = srv.post_json(CHAT, {
                    "user": bad, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
                self.assertEqual(status, 400, reply)
                self.assertEqual(reply["error"]["param"], "user")
            status, _ = srv.get("/v1/agents/" + "x" * 257)
            self.assertEqual(status, 400)
            status, _ = srv.get("/v1/agents/bad%zz")
            self.assertEqual(status, 400)
            # An encoded '/' is part of the id, never a route: this is the agent "a/rebuild".
            self.assertEqual(srv.get("/v1/agents/a%2Frebuild")[0], 404)
            self.assertEqual(srv.request("POST", "/v1/agents/a%2Frebuild", "{}")[0], 405)
        self.assertEqual(os.listdir(self.outer.name), ["store"])
        self.assertFalse(os.path.exists("/tmp/kvmem-escape"))
        for entry in store_entries(self.store):
            self.assertRegex(entry, SAFE)
            for agent in HOSTILE + IDS:
                self.assertNotIn(agent, entry.split("/"))


if __name__ == "__main__":
    unittest.main()
