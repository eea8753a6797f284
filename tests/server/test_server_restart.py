"""An agent's memory survives a crash of the server.

An agent talks for two turns; the server is killed with SIGKILL (no clean-up) and started again
on the same store. The third turn must reuse the whole previous conversation from the store
(`cached_tokens` covers both earlier prompts and the replies; only the new user turn is
prefilled), and its greedy reply must equal that of a server that never restarted.
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402


def chat(url, msgs, agent):
    c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    return c.chat.completions.create(model="kvmem", messages=msgs, max_tokens=20,
                                     temperature=0, user=agent)


TURNS = ["Hi! My dog is called Biscuit and she loves the beach.",
         "What should I pack for a beach day with her?",
         "Remind me, what is my dog's name?"]


def conversation(url, agent, turns, msgs=None):
    msgs = list(msgs or [])
    replies = []
    for t in turns:
        msgs.append({"role": "user", "content": t})
        r = chat(url, msgs, agent)
        replies.append(r)
        msgs.append({"role": "assistant", "content": r.choices[0].message.content})
    return msgs, replies


class RestartTest(unittest.TestCase):
    def test_memory_survives_sigkill(self):
        server_util.skip_without_model()
        with tempfile.TemporaryDirectory() as store, tempfile.TemporaryDirectory() as ref_store:
            first = server_util.Server(store)
            msgs, replies = conversation(first.url, "rex", TURNS[:2])
            first.kill()

            with server_util.Server(store) as second:
                status, body = second.get("/v1/agents/rex")
                self.assertEqual(status, 200, body)
                self.assertIn('"warm"', body)  # on disk only, until it is used
                msgs.append({"role": "user", "content": TURNS[2]})
                after = chat(second.url, msgs, "rex")
                log = second.stderr()
            prev = replies[-1].usage
            cached = after.usage.prompt_tokens_details.cached_tokens
            # Everything before the new turn: the previous prompt and the reply's tokens (all but
            # the last sampled one, which was never fed back).
            self.assertGreaterEqual(cached, prev.prompt_tokens + prev.completion_tokens - 1)
            self.assertLess(after.usage.prompt_tokens - cached, 30)
            self.assertNotIn("stored cache not used", log)

            with server_util.Server(ref_store) as ref:
                _, ref_replies = conversation(ref.url, "rex", TURNS)
            for a, b in zip(replies, ref_replies):
                self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)
            self.assertEqual(after.choices[0].message.content,
                             ref_replies[2].choices[0].message.content)
            self.assertEqual(ref_replies[2].usage.prompt_tokens_details.cached_tokens, cached)


if __name__ == "__main__":
    unittest.main(verbosity=2)
