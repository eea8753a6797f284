#!/usr/bin/env python3
"""bench/sse_timing.py (bench/concurrency's client statistics) on SSE timelines written by hand,
against figures computed by hand: chunks with and without content, usage, [DONE], percentiles by
linear interpolation, TTFT, gaps, per-stream and aggregate rates; no server needed."""
import json
import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from sse_timing import group_stats, parse_sse, percentile, stream_stats  # noqa: E402


def chunk(content=None, finish=None, usage=None):
    c = {"object": "chat.completion.chunk", "choices": []}
    if content is not None or finish:
        delta = {"role": "assistant"} if content is None else {"content": content}
        c["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage:
        c["usage"] = usage
    return "data: " + json.dumps(c) + "\n"


def timeline(t_first, gaps, usage_tokens=None):
    """(time, line) pairs: a role-only chunk, one content chunk at t_first and after each gap,
    a finish chunk, a usage chunk and [DONE], with blank lines between events."""
    lines = [(t_first - 0.01, chunk()), (t_first - 0.01, "\n")]
    t = t_first
    for i, g in enumerate([0.0] + gaps):
        t += g
        lines += [(t, chunk(f"w{i} ")), (t, "\n")]
    lines.append((t + 0.001, chunk(finish="length")))
    if usage_tokens is not None:
        lines.append((t + 0.002, chunk(usage={"prompt_tokens": 100, "completion_tokens":
                                              usage_tokens, "prompt_tokens_details":
                                              {"cached_tokens": 90}})))
    lines += [(t + 0.003, ": keep-alive comment\n"), (t + 0.003, "data: [DONE]\n")]
    return lines


class Percentiles(unittest.TestCase):
    def test_linear_interpolation(self):
        self.assertIsNone(percentile([], 50))
        self.assertEqual(percentile([7.0], 99), 7.0)
        self.assertEqual(percentile([4, 1, 3, 2], 50), 2.5)       # unsorted input
        self.assertEqual(percentile([1, 2, 3, 4, 5], 50), 3)
        self.assertAlmostEqual(percentile([1, 2, 3, 4], 99), 3.97)  # rank 2.97
        self.assertEqual(percentile(list(range(101)), 99), 99)    # rank 99 exactly
        self.assertEqual(percentile([10, 20], 0), 10)
        self.assertEqual(percentile([10, 20], 100), 20)


class Streams(unittest.TestCase):
    def test_parse(self):
        p = parse_sse(timeline(1.0, [0.1, 0.2], usage_tokens=3))
        self.assertEqual([round(t, 6) for t, _ in p["content"]], [1.0, 1.1, 1.3])
        self.assertEqual("".join(x for _, x in p["content"]), "w0 w1 w2 ")
        self.assertEqual(p["finish_reason"], "length")
        self.assertEqual(p["usage"]["completion_tokens"], 3)
        self.assertTrue(p["done"])
        p = parse_sse([(0.0, 'data: {"error": {"message": "full"}}\n'), (0.0, "data: {bad\n")])
        self.assertEqual(p["errors"], [{"message": "full"}])
        self.assertEqual(p["content"], [])

    def test_one_stream(self):
        # sent at 0.5, tokens at 1.0, 1.1, 1.3, 1.6: TTFT 0.5, 3 tokens in 0.6 s after the first
        s = stream_stats(0.5, parse_sse(timeline(1.0, [0.1, 0.2, 0.3], usage_tokens=4)))
        self.assertAlmostEqual(s["ttft"], 0.5)
        self.assertEqual(s["tokens"], 4)
        self.assertEqual([round(g, 6) for g in s["gaps"]], [0.1, 0.2, 0.3])
        self.assertAlmostEqual(s["rate"], 3 / 0.6)
        self.assertEqual((s["prompt_tokens"], s["cached_tokens"]), (100, 90))

    def test_usage_counts_tokens_chunks_carry(self):
        # 3 chunks carrying 6 tokens (a server that batches its chunks): usage counts
        s = stream_stats(0.0, parse_sse(timeline(1.0, [0.5, 0.5], usage_tokens=6)))
        self.assertEqual((s["tokens"], s["chunks"]), (6, 3))
        self.assertAlmostEqual(s["rate"], 5 / 1.0)
        # no usage, or usage below the chunks seen: the chunks count
        s = stream_stats(0.0, parse_sse(timeline(1.0, [0.5, 0.5])))
        self.assertEqual(s["tokens"], 3)
        s = stream_stats(0.0, parse_sse(timeline(1.0, [0.5, 0.5], usage_tokens=1)))
        self.assertEqual(s["tokens"], 3)

    def test_empty_and_single_token(self):
        s = stream_stats(0.0, parse_sse([(0.1, "data: [DONE]\n")]))
        self.assertEqual((s["tokens"], s["ttft"], s["rate"], s["gaps"]), (0, None, None, []))
        s = stream_stats(0.0, parse_sse(timeline(0.2, [], usage_tokens=1)))
        self.assertAlmostEqual(s["ttft"], 0.2)
        self.assertIsNone(s["rate"])


class Groups(unittest.TestCase):
    def test_burst(self):
        # A: sent 0.0, tokens at 1.0, 1.1, 1.2, 1.3 (4 tokens)
        # B: sent 0.1, tokens at 2.0, 2.5 (2 tokens)
        a = stream_stats(0.0, parse_sse(timeline(1.0, [0.1, 0.1, 0.1], usage_tokens=4)))
        b = stream_stats(0.1, parse_sse(timeline(2.0, [0.5], usage_tokens=2)))
        g = group_stats([a, b])
        self.assertEqual((g["streams"], g["streams_ok"], g["tokens"]), (2, 2, 6))
        self.assertAlmostEqual(g["wall_s"], 2.5)                 # earliest send to last token
        self.assertAlmostEqual(g["aggregate_tps"], 6 / 2.5)
        self.assertAlmostEqual(g["tokens_per_stream"], 3.0)
        # rates: A 3 / 0.3 = 10, B 1 / 0.5 = 2
        self.assertAlmostEqual(g["stream_tps_p50"], 6.0)
        self.assertAlmostEqual(g["stream_tps_min"], 2.0)
        # TTFTs 1.0 and 1.9
        self.assertAlmostEqual(g["ttft_p50"], 1.45)
        self.assertAlmostEqual(g["ttft_p99"], 1.0 + 0.99 * 0.9)
        # gaps pooled: 0.1, 0.1, 0.1, 0.5
        self.assertAlmostEqual(g["itl_p50"], 0.1)
        self.assertAlmostEqual(g["itl_p99"], 0.1 + 0.97 * 0.4)   # rank 2.97
        self.assertAlmostEqual(g["itl_max"], 0.5)

    def test_failed_stream_counts_in_wall_not_tokens(self):
        a = stream_stats(0.0, parse_sse(timeline(1.0, [1.0], usage_tokens=2)))
        dead = stream_stats(0.0, parse_sse([]))
        g = group_stats([a, dead])
        self.assertEqual((g["streams"], g["streams_ok"], g["tokens"]), (2, 1, 2))
        self.assertAlmostEqual(g["aggregate_tps"], 2 / 2.0)


if __name__ == "__main__":
    unittest.main()
