"""Bad input gets a clear error in the right API's format and loses nothing: malformed requests
(each a 4xx, never a 500 or a crash), hostile agent ids, and damaged cache files in the store
(truncated, bit-flipped, another model's, oversized, garbage manifest): the server reports the
damage in its log, serves the turn from the prompt (nothing cached), and the agent's memory is
whole again afterwards."""
import glob
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}


def body(**kw):
    b = {"model": "kvmem", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4,
         "temperature": 0}
    b.update(kw)
    return json.dumps(b)


class MalformedRequestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.store = tempfile.TemporaryDirectory()
        cls.srv = server_util.Server(cls.store.name)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.store.cleanup()

    def expect(self, status, path, data, headers=JSON, dialect="openai"):
        got, text = self.srv.request("POST", path, data, headers)
        self.assertEqual(got, status, f"{path} {data[:120]!r}: {text[:300]}")
        err = json.loads(text)
        if dialect == "openai":
            self.assertTrue(err["error"]["message"])
        else:
            self.assertEqual(err["type"], "error")
            self.assertTrue(err["error"]["message"])
        return err

    def test_openai_bodies(self):
        cases = [
            "{bad json",
            b'{"model":"x","messages":[{"role":"user","content":"\xff\xfe"}]}',
            body(max_tokens="x"),
            body(messages=5),
            body(messages=[]),
            body(messages=[{"role": "wizard", "content": "hi"}]),
            body(max_tokens=-1),
            body(max_tokens=10 ** 9),
            body(n=17),
            body(temperature=7),
            body(messages=[{"role": "user", "content": "word " * 6000}]),  # past the context
        ]
        for c in cases:
            self.expect(400, CHAT, c)
        self.expect(400, "/v1/completions", json.dumps({"model": "k", "prompt": [[1, 2, 10 ** 9]]}))
        self.expect(413, CHAT, "x" * (33 << 20))

    def test_anthropic_bodies(self):
        msgs = [{"role": "user", "content": "hi"}]
        self.expect(400, "/v1/messages", json.dumps({"model": "k", "messages": msgs}),
                    dialect="anthropic")  # max_tokens is required
        self.expect(400, "/v1/messages",
                    json.dumps({"model": "k", "max_tokens": "many", "messages": msgs}),
                    dialect="anthropic")

    def test_bad_agent_ids(self):
        # Any string of 1..256 bytes is an id (test_server_agent_ids.py); these are not.
        for agent in ["", "x" * 257, "a\x01b", "nul\x00"]:
            self.expect(400, CHAT, body(user=agent))
        for agent in ["x" * 257, "tab\there"]:
            self.expect(400, CHAT, body(), headers={**JSON, "X-Agent-Id": agent})
        status, text = self.srv.get("/v1/agents/nobody")
        self.assertEqual(status, 404, text)
        status, _ = self.srv.get("/health")
        self.assertEqual(status, 200)


def turn(srv, agent, content):
    status, text = srv.request("POST", CHAT, body(user=agent, messages=[
        {"role": "user", "content": content}]), JSON)
    assert status == 200, text
    return json.loads(text)


class DamagedStoreTest(unittest.TestCase):
    def damage_and_recover(self, damage, what):
        with tempfile.TemporaryDirectory() as store:
            prompt = "Please remember that the meeting is on Thursday at noon. " * 30
            with server_util.Server(store) as srv:
                turn(srv, "victim", prompt)
            agent_dirs = [d for d in glob.glob(os.path.join(store, "*", "*")) if os.path.isdir(d)]
            self.assertEqual(len(agent_dirs), 1)
            damage(agent_dirs[0])
            with server_util.Server(store) as srv:
                r = turn(srv, "victim", prompt)  # the same prompt: everything would be cached
                self.assertEqual(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0, what)
                again = turn(srv, "victim", prompt)
                log = srv.stderr()
            self.assertIn("stored cache not used", log, what)
            self.assertGreater(again["usage"]["prompt_tokens_details"]["cached_tokens"], 0, what)
            # The rewritten cache loads cleanly after another restart.
            with server_util.Server(store) as srv:
                r = turn(srv, "victim", prompt)
                self.assertGreater(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0, what)
                self.assertNotIn("stored cache not used", srv.stderr(), what)

    @staticmethod
    def blocks(d):
        return sorted(glob.glob(os.path.join(d, "kv-*.safetensors")))

    def test_truncated_block(self):
        def damage(d):
            b = self.blocks(d)[0]
            os.truncate(b, os.path.getsize(b) // 2)
        self.damage_and_recover(damage, "truncated")

    def test_bit_flip(self):
        def damage(d):
            b = self.blocks(d)[0]
            with open(b, "r+b") as f:
                f.seek(os.path.getsize(b) // 2)
                x = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([x[0] ^ 0x10]))
        self.damage_and_recover(damage, "bit flip")

    def test_oversized_block(self):
        def damage(d):
            os.truncate(self.blocks(d)[0], 8 << 30)  # sparse: 8 GiB claimed
        self.damage_and_recover(damage, "oversized")

    def test_other_models_manifest(self):
        def damage(d):
            path = os.path.join(d, "manifest.json")
            with open(path) as f:
                m = json.load(f)
            key = next(k for k in m if "fingerprint" in k)
            m[key] = "0" * len(m[key])
            with open(path, "w") as f:
                json.dump(m, f)
        self.damage_and_recover(damage, "wrong model")

    def test_garbage_manifest(self):
        def damage(d):
            with open(os.path.join(d, "manifest.json"), "wb") as f:
                f.write(b"\x00{not json" * 100)
        self.damage_and_recover(damage, "garbage manifest")


if __name__ == "__main__":
    unittest.main(verbosity=2)
