"""Memory that is never lost by accident, through the official clients: a request that diverges
from an agent's conversation keeps it as a checkpoint (fork, the default), says so in the
X-Kvmem-Divergence header and in usage, and the conversation resent later continues from the
checkpoint (>= 90% of its prompt cached), across a SIGKILL and restart; "replace" drops it and
"reject" is a 409 that changes nothing. An agent created with "conversation": "server" takes
only what is new in each request, in either dialect, across a restart."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import anthropic  # noqa: E402
import openai  # noqa: E402

HEADER = "x-kvmem-divergence"
FACTS = ["The shed key hangs on the third hook.", "The boat is called Marlin and sleeps four.",
         "Dinner on Friday is at the harbour inn.", "The ferry leaves at seven sharp."]


def oai(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)


def chat(srv, user, messages, **extra):
    """One chat turn with the raw response: (completion, headers)."""
    raw = oai(srv).chat.completions.with_raw_response.create(
        model="kvmem", messages=messages, user=user, max_tokens=8, temperature=0,
        extra_body=extra or None)
    return raw.parse(), raw.headers


def cached(completion):
    return completion.usage.prompt_tokens_details.cached_tokens


def conversation(srv, user, facts):
    """A conversation of one user message per fact, each answer appended; the final messages."""
    messages = [{"role": "system", "content": "You are a careful assistant. " * 4}]
    for fact in facts:
        messages.append({"role": "user", "content": f"Please remember: {fact} " * 3})
        completion, headers = chat(srv, user, messages)
        assert HEADER not in headers, headers  # each turn extends the one before
        messages.append({"role": "assistant", "content": completion.choices[0].message.content})
    return messages


def agent(srv, user):
    status, body = srv.request("GET", "/v1/agents/" + user)
    assert status == 200, body
    return json.loads(body)


class DivergenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.dir = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_fork_keeps_the_conversation_and_a_resend_after_a_restart_continues_it(self):
        store = os.path.join(self.dir.name, "fork")
        srv = server_util.Server(store)
        try:
            original = conversation(srv, "ada", FACTS)
            held = agent(srv, "ada")["cached_tokens"]
            # Another conversation under the same agent: the earlier one becomes a checkpoint.
            other = [{"role": "user", "content": "Unrelated: what is two plus two?"}]
            completion, headers = chat(srv, "ada", other)
            self.assertEqual(headers[HEADER], "fork; checkpoint=ckpt-1")
            self.assertEqual(completion.usage.model_extra["conversation"],
                             {"diverged": True, "action": "fork", "checkpoint": "ckpt-1"})
            listed = agent(srv, "ada")["checkpoints"]
            self.assertEqual([c["id"] for c in listed], ["ckpt-1"])
            self.assertEqual(listed[0]["cached_tokens"], held)
            srv.kill()  # nothing acknowledged may be lost
            srv = server_util.Server(store)
            # The original conversation resent with a new question continues from the checkpoint.
            resent = original + [{"role": "user", "content": "Where does the key hang?"}]
            completion, headers = chat(srv, "ada", resent)
            self.assertEqual(headers[HEADER], "fork; checkpoint=ckpt-2; restored=ckpt-1")
            self.assertGreaterEqual(cached(completion), 0.9 * completion.usage.prompt_tokens)
            self.assertEqual(cached(completion), held)
            self.assertEqual([c["id"] for c in agent(srv, "ada")["checkpoints"]], ["ckpt-2"])
        finally:
            srv.stop()

    def test_replace_and_reject(self):
        store = os.path.join(self.dir.name, "modes")
        with server_util.Server(store) as srv:
            original = conversation(srv, "bo", FACTS[:2])
            held = agent(srv, "bo")["cached_tokens"]
            other = [{"role": "user", "content": "Something else entirely."}]
            with self.assertRaises(openai.ConflictError) as e:
                chat(srv, "bo", other, on_diverge="reject")
            self.assertIn("reject", str(e.exception))
            self.assertEqual(agent(srv, "bo")["cached_tokens"], held)
            self.assertEqual(agent(srv, "bo")["checkpoints"], [])
            # A request continuing the conversation is not a divergence.
            completion, headers = chat(srv, "bo", original + [{"role": "user", "content": "ok"}],
                                       on_diverge="reject")
            self.assertNotIn(HEADER, headers)
            self.assertNotIn("conversation", completion.usage.model_extra)
            # Streamed: the header comes with the stream's start.
            raw = oai(srv).chat.completions.with_raw_response.create(
                model="kvmem", messages=other, user="bo", max_tokens=8, stream=True,
                extra_body={"on_diverge": "replace"})
            self.assertEqual(raw.headers[HEADER], "replace")
            self.assertTrue("".join(c.choices[0].delta.content or "" for c in raw.parse()
                                    if c.choices))
            self.assertEqual(agent(srv, "bo")["checkpoints"], [])
            with self.assertRaises(openai.BadRequestError):
                chat(srv, "bo", other, on_diverge="sometimes")
            # Anthropic's dialect: the same extension, the same report.
            client = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
            raw = client.messages.with_raw_response.create(
                model="kvmem", max_tokens=8, metadata={"user_id": "bo"},
                messages=[{"role": "user", "content": "A third conversation."}])
            self.assertEqual(raw.headers[HEADER], "fork; checkpoint=ckpt-1")
            self.assertEqual(raw.parse().usage.model_extra["conversation"]["action"], "fork")

    def test_a_server_side_conversation_takes_only_what_is_new(self):
        store = os.path.join(self.dir.name, "server")
        srv = server_util.Server(store)
        try:
            status, body = srv.post_json("/v1/agents", {"id": "cy", "conversation": "server",
                                                       "max_checkpoints": 2})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["conversation"], "server")
            self.assertEqual(body["max_checkpoints"], 2)
            first, _ = chat(srv, "cy", [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": FACTS[0] * 3}])
            held = agent(srv, "cy")["cached_tokens"]
            second, _ = chat(srv, "cy", [{"role": "user", "content": "Where is the key?"}])
            # The whole first exchange is reused, and the prompt is longer than what was sent.
            self.assertEqual(cached(second), held)
            self.assertGreater(second.usage.prompt_tokens, held + 5)
            srv.kill()
            srv = server_util.Server(store)
            client = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
            third = client.messages.create(
                model="kvmem", max_tokens=8, metadata={"user_id": "cy"},
                messages=[{"role": "user", "content": "And the boat?"}])
            self.assertGreaterEqual(third.usage.cache_read_input_tokens,
                                    second.usage.prompt_tokens)
            self.assertEqual(agent(srv, "cy")["checkpoints"], [])  # nothing diverged
            quoted = 'say "hi" \\ later'
            self.assertEqual(srv.post_json("/v1/agents", {"id": quoted})[0], 200)
        finally:
            srv.stop()
        # kvmem inspect --json writes one valid JSON object per agent, whatever its id.
        out = subprocess.run([server_util.BIN, "inspect", "--store", store, "--json",
                              "-m", server_util.MODEL], capture_output=True, text=True, check=True)
        rows = {r["agent"]: r for r in map(json.loads, out.stdout.splitlines())}
        self.assertEqual(rows["cy"]["checkpoints"], 0)
        self.assertIn(quoted, rows)


if __name__ == "__main__":
    unittest.main()
