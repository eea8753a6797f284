"""The OpenAI sampling surface against independent computations, through the official client:
logprobs (chat and completions) equal the log-softmax of `kvmem logits` over the same token ids
(ids found by the independent `tokenizers` tokenizer of tests/oracle/gguf_tokenizer.py), echo
scoring likewise, n > 1 choices, seeds, and frequency/presence penalties replayed by hand over
the raw logits.

The server stores KV rows in f16 (as `kvmem logits` does), so the two differ only by the order
of floating-point sums between batched and one-token passes.
"""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "oracle"))
import server_util  # noqa: E402

import openai  # noqa: E402

SERVER = None
TOK = None
TOL = 2e-2  # logprob units; measured differences are ~1e-3


def setUpModule():
    global SERVER, STORE, TOK
    server_util.skip_without_model()
    import gguf_tokenizer
    TOK = gguf_tokenizer.from_gguf(server_util.MODEL)
    STORE = tempfile.TemporaryDirectory()
    SERVER = server_util.Server(STORE.name, extra=["--kv-format", "f16"], ctx=1024)


def tearDownModule():
    SERVER.stop()
    STORE.cleanup()


def oai():
    return openai.OpenAI(base_url=SERVER.url + "/v1", api_key="unused", max_retries=0)


def byte_level(token_bytes):
    """GPT-2's bytes_to_unicode: how a byte-level BPE vocabulary spells bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return "".join(chr(table[b]) for b in token_bytes)


def token_id(text):
    i = TOK.token_to_id(byte_level(text.encode()))
    assert i is not None, repr(text)
    return i


def log_softmax_rows(ids):
    """(len(ids), n_vocab) log-softmax of `kvmem logits` over ids."""
    with tempfile.NamedTemporaryFile(suffix=".f32") as out:
        subprocess.run([server_util.BIN, "logits", "-m", server_util.MODEL, "-t", "2", "--tokens",
                        ",".join(map(str, ids)), "-o", out.name], check=True)
        logits = np.fromfile(out.name, dtype=np.float32).reshape(len(ids), -1).astype(np.float64)
    m = logits.max(axis=1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True)), logits


class LogprobsTest(unittest.TestCase):
    def test_completion_echo_logprobs_equal_kvmem_logits(self):
        prompt = "The capital of France is"
        r = oai().completions.create(model="m", prompt=prompt, max_tokens=6, temperature=0,
                                     echo=True, logprobs=3)
        lp = r.choices[0].logprobs
        self.assertEqual(r.choices[0].text, "".join(lp.tokens))
        self.assertTrue(r.choices[0].text.startswith(prompt))
        ids = [token_id(t) for t in lp.tokens]
        n_prompt = len(TOK.encode(prompt, add_special_tokens=False).ids)
        self.assertEqual(ids[:n_prompt], TOK.encode(prompt, add_special_tokens=False).ids)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        ref, _ = log_softmax_rows(ids)
        for i in range(1, len(ids)):
            self.assertAlmostEqual(lp.token_logprobs[i], ref[i - 1, ids[i]], delta=TOL)
            top = lp.top_logprobs[i]
            want = np.argsort(-ref[i - 1])[:3]
            for j in want:  # the three best are listed (with the chosen token besides)
                tok = TOK.decode([int(j)])
                if tok in top:
                    self.assertAlmostEqual(top[tok], ref[i - 1, j], delta=TOL)
            self.assertGreaterEqual(len(top), 3)
            if i >= n_prompt:  # generated greedily: the argmax
                self.assertEqual(ids[i], int(np.argmax(ref[i - 1])))
        offsets = np.cumsum([0] + [len(t.encode()) for t in lp.tokens[:-1]])
        self.assertEqual(lp.text_offset, offsets.tolist())

    def test_echo_scoring_with_max_tokens_0(self):
        # As lm-eval-harness scores a continuation: echo, logprobs, max_tokens 0.
        text = "Once upon a time there was a small cat."
        r = oai().completions.create(model="m", prompt=text, max_tokens=0, echo=True, logprobs=1,
                                     temperature=0)
        lp = r.choices[0].logprobs
        ids = TOK.encode(text, add_special_tokens=False).ids
        self.assertEqual([token_id(t) for t in lp.tokens], ids)
        self.assertEqual(r.choices[0].text, text)
        self.assertEqual(r.usage.completion_tokens, 0)
        self.assertIsNone(lp.token_logprobs[0])
        ref, _ = log_softmax_rows(ids)
        got = np.array(lp.token_logprobs[1:])
        want = np.array([ref[i - 1, ids[i]] for i in range(1, len(ids))])
        np.testing.assert_allclose(got, want, atol=TOL)
        self.assertAlmostEqual(got.sum(), want.sum(), delta=TOL * 4)

    def test_chat_logprobs_greedy_sorted_and_streamed_alike(self):
        c = oai()
        msgs = [{"role": "user", "content": "Name a colour."}]
        r = c.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=0,
                                      logprobs=True, top_logprobs=4)
        content = r.choices[0].logprobs.content
        self.assertEqual("".join(t.token for t in content), r.choices[0].message.content)
        for t in content:
            self.assertEqual(len(t.top_logprobs), 4)
            values = [a.logprob for a in t.top_logprobs]
            self.assertEqual(values, sorted(values, reverse=True))
            self.assertEqual(t.top_logprobs[0].token, t.token)  # greedy: the best
            self.assertAlmostEqual(t.logprob, values[0], places=6)
            self.assertEqual(bytes(t.bytes), t.token.encode())
            self.assertLessEqual(np.exp(values).sum(), 1.0 + 1e-5)
        stream = c.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=0,
                                           logprobs=True, top_logprobs=4, stream=True)
        streamed = [t for ch in stream if ch.choices and ch.choices[0].logprobs
                    for t in ch.choices[0].logprobs.content]
        self.assertEqual([(t.token, round(t.logprob, 5)) for t in streamed],
                         [(t.token, round(t.logprob, 5)) for t in content])
        plain = c.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=0)
        self.assertIsNone(plain.choices[0].logprobs)


class ChoicesTest(unittest.TestCase):
    MSGS = [{"role": "user", "content": "Write one word about the sea."}]

    def test_n_greedy_equals_n1(self):
        c = oai()
        one = c.chat.completions.create(model="m", messages=self.MSGS, max_tokens=10,
                                        temperature=0)
        three = c.chat.completions.create(model="m", messages=self.MSGS, max_tokens=10,
                                          temperature=0, n=3)
        self.assertEqual([ch.index for ch in three.choices], [0, 1, 2])
        for ch in three.choices:
            self.assertEqual(ch.message.content, one.choices[0].message.content)
        self.assertEqual(three.usage.prompt_tokens, one.usage.prompt_tokens)
        self.assertEqual(three.usage.completion_tokens, 3 * one.usage.completion_tokens)

    def test_seeded_choices_reproducible_and_seed_plus_i(self):
        c = oai()
        kw = dict(model="m", prompt="My favourite animal is", max_tokens=8, temperature=1.0,
                  top_p=1.0, extra_body={"top_k": 0, "min_p": 0})
        a = c.completions.create(n=3, seed=11, **kw)
        b = c.completions.create(n=3, seed=11, **kw)
        self.assertEqual([x.text for x in a.choices], [x.text for x in b.choices])
        self.assertGreater(len({x.text for x in a.choices}), 1)  # different seeds per choice
        # Choice i samples with seed + i: n = 1 with seed 12 is choice 1.
        single = c.completions.create(n=1, seed=12, **kw)
        self.assertEqual(single.choices[0].text, a.choices[1].text)
        streamed = c.completions.create(n=3, seed=11, stream=True, **kw)
        texts = ["", "", ""]
        for ch in streamed:
            for x in ch.choices:
                texts[x.index] += x.text
        self.assertEqual(texts, [x.text for x in a.choices])

    def test_n_with_agent_is_400_naming_n(self):
        with self.assertRaises(openai.BadRequestError) as e:
            oai().chat.completions.create(model="m", messages=self.MSGS, max_tokens=4, n=2,
                                          user="sampling-agent")
        self.assertIn("'n'", str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e:
            oai().completions.create(model="m", prompt="x", max_tokens=0, echo=True, logprobs=1,
                                     user="sampling-agent")
        self.assertIn("'echo'", str(e.exception))


class PenaltiesTest(unittest.TestCase):
    PROMPT = "1, 1, 1, 1, 1, 1, 1, 1,"

    def generate(self, **kw):
        r = oai().completions.create(model="m", prompt=self.PROMPT, max_tokens=12,
                                     temperature=0, logprobs=0, **kw)
        return r.choices[0]

    def test_penalties_change_a_repeating_reply_as_defined(self):
        plain = self.generate()
        self.assertTrue(plain.text.startswith(" 1, 1, 1, 1"), plain.text)  # repeats at 0
        for fp, pp in [(2.0, 0.0), (0.0, 2.0), (1.0, 1.0), (-1.0, 0.5)]:
            pen = self.generate(frequency_penalty=fp, presence_penalty=pp)
            if fp == 2.0:
                self.assertNotEqual(pen.text, plain.text)
            # Replay: raw logits of prompt + reply, minus OpenAI's penalties over the reply
            # so far, must pick each generated token greedily.
            prompt_ids = TOK.encode(self.PROMPT, add_special_tokens=False).ids
            gen = [token_id(t) for t in pen.logprobs.tokens]
            _, logits = log_softmax_rows(prompt_ids + gen)
            counts = {}
            for k, t in enumerate(gen):
                row = logits[len(prompt_ids) - 1 + k].copy()
                for j, cnt in counts.items():
                    row[j] -= cnt * fp + pp
                best = np.sort(row)[-2:]
                if best[1] - best[0] > 1e-2:  # no near-tie the kernels' rounding could flip
                    self.assertEqual(t, int(np.argmax(row)), (fp, pp, k))
                counts[t] = counts.get(t, 0) + 1

    def test_penalty_range_is_validated(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.generate(frequency_penalty=2.5)
        self.assertIn("'frequency_penalty'", str(e.exception))


if __name__ == "__main__":
    unittest.main()
