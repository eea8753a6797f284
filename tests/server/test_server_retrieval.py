"""A memart agent (POST /v1/agents with "memory": {"policy": "memart"}) over the real model.

The client sends only each new message, as to an assistant that remembers: the server's context
is 512 tokens, and the agent's history grows well past it while every turn still succeeds,
prefilling only its own message and reading a bounded number of retrieved history rows (the
agents API reports them, with the recalled blocks' text). A full agent given the same
conversation as one prompt is refused: it does not fit. After SIGKILL and a restart the agent is
still a memart agent with the same history, and goes on; a question named by kvmem's
retrieval_query field alone scores the blocks (the agents API shows which tokens did).
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402

FACTS = [
    "My name is Ada and my locker code is 4471.",
    "I am planning a trip to Lisbon in May with my sister Rita.",
    "My favourite food is grilled sardines with lemon and salt.",
    "I work as a nurse at the Saint Mary hospital on night shifts.",
    "My cat is called Pixel and she is afraid of the vacuum cleaner.",
    "I am learning to play the cello, slowly, every Sunday morning.",
    "My brother Tom lives in Oslo and works on offshore wind farms.",
    "Last winter I broke my wrist while skating on the frozen lake.",
    "I keep my spare house key under the blue flower pot by the door.",
    "My first car was a green Fiat Panda that I bought in 2009.",
]
TOP_K, BLOCK = 4, 16


def say(url, text, agent):
    c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    return c.chat.completions.create(model="kvmem", messages=[{"role": "user", "content": text}],
                                     max_tokens=16, temperature=0, user=agent)


class RetrievalAgentTest(unittest.TestCase):
    def first_life(self, srv):
        """Creates the agent and talks past the context; returns its final GET /v1/agents."""
        # Created through the official client's generic request (kvmem's own endpoint).
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        body = {"id": "ada", "memory": {"policy": "memart",
                                        "config": {"preset": "paper", "top_k": TOP_K,
                                                   "block_size": BLOCK}}}
        made = c.post("/agents", body=body, cast_to=object)
        self.assertEqual(made["memory"]["policy"], "memart")
        self.assertEqual(made["memory"]["config"]["top_k"], TOP_K)
        self.assertIsNone(made["last_turn"])
        with self.assertRaises(openai.ConflictError):
            c.post("/agents", body=body, cast_to=object)

        for fact in FACTS:
            r = say(srv.url, fact, "ada")
            self.assertTrue(r.choices[0].message.content)
        status, text = srv.get("/v1/agents/ada")
        self.assertEqual(status, 200, text)
        agent = json.loads(text)
        turn = agent["last_turn"]
        self.assertGreater(agent["cached_tokens"], 512)  # the history, past the context
        self.assertEqual(turn["history_tokens"] + turn["prefill_tokens"] +
                         r.usage.completion_tokens - 1, agent["cached_tokens"])
        # Each turn reads at most top_k blocks plus the newest partial one, per layer.
        self.assertLessEqual(turn["retrieved_rows"], (TOP_K + 1) * BLOCK)
        self.assertEqual(turn["kv_len_decode"], turn["retrieved_rows"] + turn["prefill_tokens"])
        self.assertEqual(r.usage.prompt_tokens_details.cached_tokens, turn["retrieved_rows"])
        self.assertLess(turn["prefill_tokens"], 60)  # one message and the template
        self.assertGreaterEqual(len(turn["blocks"]), TOP_K)
        for b in turn["blocks"]:
            self.assertEqual(b["first_token"], b["block"] * BLOCK)
            self.assertTrue(1 <= b["n_tokens"] <= BLOCK and b["text"], b)
            self.assertTrue(1 <= b["layers"] <= 30, b)

        # The same conversation as one prompt does not fit a full agent's context.
        whole = " ".join(FACTS * 5)
        with self.assertRaises(openai.BadRequestError):
            say(srv.url, whole, "full-agent")
        return agent

    def test_history_outgrows_the_context_and_survives_a_restart(self):
        server_util.skip_without_model()
        with tempfile.TemporaryDirectory() as store:
            srv = server_util.Server(store, ctx=512)
            try:
                agent = self.first_life(srv)
            finally:
                srv.kill()
            with server_util.Server(store, ctx=512) as again:
                status, text = again.get("/v1/agents/ada")
                self.assertEqual(status, 200, text)
                stored = json.loads(text)
                self.assertEqual(stored["memory"]["policy"], "memart")
                self.assertEqual(stored["memory"]["config"]["block_size"], BLOCK)
                self.assertEqual(stored["cached_tokens"], agent["cached_tokens"])
                r = say(again.url, "What is my locker code?", "ada")
                self.assertTrue(r.choices[0].message.content)
                turn = json.loads(again.get("/v1/agents/ada")[1])["last_turn"]
                self.assertEqual(turn["history_tokens"], agent["cached_tokens"])
                # kvmem's retrieval_query: only the question's tokens score the blocks.
                c = openai.OpenAI(base_url=again.url + "/v1", api_key="unused", max_retries=0)
                ask = "Please answer in a few words. What is my locker code?"
                r = c.chat.completions.create(
                    model="kvmem", messages=[{"role": "user", "content": ask}], max_tokens=16,
                    temperature=0, user="ada",
                    extra_body={"retrieval_query": "What is my locker code?"})
                self.assertTrue(r.choices[0].message.content)
                turn = json.loads(again.get("/v1/agents/ada")[1])["last_turn"]
                begin, end = turn["scoring_tokens"]
                self.assertTrue(0 < begin < end < turn["prefill_tokens"] - 1, turn)
                self.assertLessEqual(end - begin, 8, turn)  # five words and a question mark
                with self.assertRaises(openai.BadRequestError):
                    c.chat.completions.create(
                        model="kvmem", messages=[{"role": "user", "content": ask}],
                        max_tokens=4, user="ada", extra_body={"retrieval_query": "my pen"})
                self.assertNotIn("not usable", again.stderr())


if __name__ == "__main__":
    unittest.main(verbosity=2)
