"""The server through the official `openai` and `anthropic` Python clients: chat and text
completions, Anthropic messages, streaming and not, agents' caches across turns (usage reports
the reused prefix), and several agents at once.

Greedy decoding (temperature 0) makes every reply a deterministic function of its prompt, so a
streamed reply must equal the non-streamed one, and a reply computed while other agents run
must equal the one computed alone.
"""
import os
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import anthropic  # noqa: E402
import openai  # noqa: E402

SERVER = None
# This anthropic client release has no `temperature` argument; the API field still exists.
GREEDY = {"temperature": 0}


def setUpModule():
    global SERVER, STORE
    server_util.skip_without_model()
    STORE = tempfile.TemporaryDirectory()
    SERVER = server_util.Server(STORE.name)


def tearDownModule():
    SERVER.stop()
    STORE.cleanup()


def oai():
    return openai.OpenAI(base_url=SERVER.url + "/v1", api_key="unused", max_retries=0)


def claude():
    return anthropic.Anthropic(base_url=SERVER.url, api_key="unused", max_retries=0)


def chat(client, messages, agent=None, max_tokens=24):
    r = client.chat.completions.create(model="kvmem", messages=messages, max_tokens=max_tokens,
                                       temperature=0, **({"user": agent} if agent else {}))
    return r


class OpenAiTest(unittest.TestCase):
    def test_agent_cache_reused_on_the_next_turn(self):
        c = oai()
        msgs = [{"role": "user", "content": "My favourite colour is green. Say hello."}]
        r1 = chat(c, msgs, agent="oai-agent")
        self.assertTrue(r1.choices[0].message.content)
        self.assertEqual(r1.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertGreater(r1.usage.completion_tokens, 0)
        msgs += [{"role": "assistant", "content": r1.choices[0].message.content},
                 {"role": "user", "content": "What is my favourite colour?"}]
        r2 = chat(c, msgs, agent="oai-agent")
        cached = r2.usage.prompt_tokens_details.cached_tokens
        # The whole first prompt and the reply's tokens are reused; only the new turn is not.
        self.assertGreaterEqual(cached, r1.usage.prompt_tokens)
        self.assertLess(cached, r2.usage.prompt_tokens)
        self.assertLess(r2.usage.prompt_tokens - cached, 40)

    def test_streaming_equals_non_streaming(self):
        c = oai()
        msgs = [{"role": "user", "content": "Name three fruits."}]
        whole = chat(c, msgs).choices[0].message.content
        parts, finish = [], None
        for chunk in c.chat.completions.create(model="kvmem", messages=msgs, max_tokens=24,
                                               temperature=0, stream=True):
            if chunk.choices:
                parts.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
        self.assertEqual("".join(parts), whole)
        self.assertIn(finish, ("stop", "length"))

    def test_text_completion_streaming_and_not(self):
        c = oai()
        r = c.completions.create(model="kvmem", prompt="The capital of France is", max_tokens=8,
                                 temperature=0)
        text = r.choices[0].text
        self.assertTrue(text)
        streamed = "".join(ch.choices[0].text for ch in c.completions.create(
            model="kvmem", prompt="The capital of France is", max_tokens=8, temperature=0,
            stream=True) if ch.choices)
        self.assertEqual(streamed, text)
        self.assertIn("Paris", text)

    def test_models(self):
        ids = [m.id for m in oai().models.list().data]
        self.assertEqual(len(ids), 1)
        self.assertIn("SmolLM2", ids[0])

    def test_stop_sequence(self):
        c = oai()
        msgs = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
        full = chat(c, msgs, max_tokens=40).choices[0].message.content
        self.assertIn("4", full)
        stop = full[full.index("4"):full.index("4") + 1]
        r = c.chat.completions.create(model="kvmem", messages=msgs, max_tokens=40, temperature=0,
                                      stop=[stop])
        self.assertEqual(r.choices[0].message.content, full[:full.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")


class AnthropicTest(unittest.TestCase):
    def test_messages_streaming_and_cache_read(self):
        c = claude()
        msgs = [{"role": "user", "content": "I live in Lisbon. Greet me."}]
        r1 = c.messages.create(model="kvmem", max_tokens=24, messages=msgs, extra_body=GREEDY,
                               metadata={"user_id": "claude-agent"})
        text = "".join(b.text for b in r1.content if b.type == "text")
        self.assertTrue(text)
        self.assertIn(r1.stop_reason, ("end_turn", "max_tokens"))
        self.assertEqual(r1.usage.cache_read_input_tokens or 0, 0)
        msgs += [{"role": "assistant", "content": text},
                 {"role": "user", "content": "Where do I live?"}]
        with c.messages.stream(model="kvmem", max_tokens=24, messages=msgs, extra_body=GREEDY,
                               metadata={"user_id": "claude-agent"}) as s:
            streamed = "".join(s.text_stream)
            final = s.get_final_message()
        self.assertEqual("".join(b.text for b in final.content if b.type == "text"), streamed)
        self.assertGreaterEqual(final.usage.cache_read_input_tokens, r1.usage.input_tokens)
        # The same request again, not streamed, from a fresh agent: the same greedy reply.
        r3 = c.messages.create(model="kvmem", max_tokens=24, messages=msgs, extra_body=GREEDY)
        self.assertEqual("".join(b.text for b in r3.content if b.type == "text"), streamed)


class ConcurrencyTest(unittest.TestCase):
    def test_agents_in_parallel_equal_agents_alone(self):
        c = oai()
        prompts = [f"Tell me a fact about the number {n}." for n in (3, 7, 12, 42)]

        def conversation(agent, prompt):
            msgs = [{"role": "user", "content": prompt}]
            r1 = chat(c, msgs, agent=agent, max_tokens=16)
            msgs += [{"role": "assistant", "content": r1.choices[0].message.content},
                     {"role": "user", "content": "And another one?"}]
            r2 = chat(c, msgs, agent=agent, max_tokens=16)
            return (r1.choices[0].message.content, r2.choices[0].message.content,
                    r2.usage.prompt_tokens_details.cached_tokens)

        alone = [conversation(f"alone-{i}", p) for i, p in enumerate(prompts)]
        results = [None] * len(prompts)

        def run(i):
            results[i] = conversation(f"together-{i}", prompts[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for a, b in zip(alone, results):
            self.assertEqual(a[:2], b[:2])
            self.assertGreater(b[2], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
