#!/usr/bin/env python3
"""scripts/gen_agent_traces.py on the LoCoMo conversations (/work/shared/data/locomo, or
$KVMEM_LOCOMO): the same seed gives the same bytes and another seed other traces; every field of
the format (docs/eval/agent-trace.md) has its type and place; each probe's answer is verbatim in
its evidence turns, tool turns before after_turn, and in no other turn up to after_turn; a
distractor of the same kind precedes each probe; the estimated length is within --max-tokens,
the turn count within bounds, research outputs 150-500 words; a probe per trace has its evidence
in the first third; docs/eval/agent-trace/example.json is what its stated command writes.
Runs with unittest (ctest) or pytest."""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gen_agent_traces.py")
LOCOMO = os.environ.get("KVMEM_LOCOMO", "/work/shared/data/locomo")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_agent_traces as gen  # noqa: E402


def generate(out, *args):
    r = subprocess.run([sys.executable, SCRIPT, "--out", out, "--locomo", LOCOMO, *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    files = {}
    for f in sorted(glob.glob(os.path.join(out, "*.json"))):
        with open(f, "rb") as fh:
            files[os.path.basename(f)] = fh.read()
    return files


def sentence_pattern(template):
    """The planted sentence of a template as a regex: entity and value slots match anything."""
    sentence = gen.TEMPLATES[template][2]
    parts = re.split(r"\{\w+\}", sentence)
    return re.compile("(.+?)".join(re.escape(p) for p in parts))


@unittest.skipUnless(glob.glob(os.path.join(LOCOMO, "conv-*.json")), "no LoCoMo data")
class GenAgentTraces(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.runs = {}   # (max_tokens, min_turns, max_turns) -> {file: bytes}
        for mt, lo, hi in [(6000, 10, 40), (3000, 10, 40), (6000, 12, 16)]:
            out = os.path.join(cls.dir.name, "%d-%d-%d" % (mt, lo, hi))
            cls.runs[(mt, lo, hi)] = generate(out, "--n", "40", "--seed", "7",
                                              "--max-tokens", str(mt), "--min-turns", str(lo),
                                              "--max-turns", str(hi))

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def traces(self):
        for (mt, lo, hi), files in self.runs.items():
            for name, data in files.items():
                yield (mt, lo, hi), name, json.loads(data)

    def test_same_seed_same_bytes_other_seed_other_traces(self):
        with tempfile.TemporaryDirectory() as d:
            again = generate(os.path.join(d, "a"), "--n", "40", "--seed", "7",
                             "--max-tokens", "3000")
            other = generate(os.path.join(d, "b"), "--n", "40", "--seed", "8",
                             "--max-tokens", "3000")
            fewer = generate(os.path.join(d, "c"), "--n", "5", "--seed", "7",
                             "--max-tokens", "3000")
        self.assertEqual(again, self.runs[(3000, 10, 40)])
        self.assertEqual(len(again), 40)
        self.assertFalse(set(again.values()) & set(other.values()))
        for name, data in fewer.items():   # trace i depends on (seed, i) alone
            self.assertEqual(data, again[name])

    def test_schema(self):
        for _, name, t in self.traces():
            self.assertEqual(set(t), {"id", "system", "tools", "turns", "probes"}, name)
            self.assertEqual(name, t["id"] + ".json")
            self.assertTrue(isinstance(t["system"], str) and t["system"])
            names = set()
            for tool in t["tools"]:
                self.assertEqual(set(tool), {"type", "function"})
                self.assertEqual(tool["type"], "function")
                f = tool["function"]
                self.assertEqual(set(f), {"name", "description", "parameters"})
                self.assertTrue(isinstance(f["name"], str) and isinstance(f["description"], str))
                self.assertEqual(f["parameters"]["type"], "object")
                self.assertTrue(set(f["parameters"]["required"]) <= set(f["parameters"]["properties"]))
                names.add(f["name"])
            turns = t["turns"]
            self.assertEqual(turns[0]["role"], "user")
            self.assertEqual(turns[-1]["role"], "assistant")
            for i, turn in enumerate(turns):
                self.assertIsInstance(turn["content"], str)
                self.assertTrue(turn["content"])
                if turn["role"] == "tool":
                    self.assertEqual(set(turn), {"role", "name", "content"})
                    self.assertIn(turn["name"], names)
                    self.assertEqual(turns[i - 1]["role"], "assistant")   # answers a call
                    self.assertTrue(turns[i - 1]["content"].startswith(turn["name"] + "("))
                else:
                    self.assertEqual(set(turn), {"role", "content"})
                    self.assertIn(turn["role"], ("user", "assistant"))
                if turn["role"] == "assistant" and i + 1 < len(turns):
                    self.assertEqual(turns[i + 1]["role"], "tool")   # every call is answered
                if turn["role"] == "user" and i > 0:
                    self.assertEqual(turns[i - 1]["role"], "tool")
            self.assertTrue(2 <= len(t["probes"]) <= 4, name)
            for p in t["probes"]:
                self.assertEqual(set(p), {"after_turn", "question", "answer", "evidence_turns"})
                self.assertIsInstance(p["after_turn"], int)
                self.assertTrue(p["question"].endswith("?"))
                self.assertTrue(1 <= len(p["answer"].split()) <= 6, p["answer"])
                self.assertTrue(p["evidence_turns"])
                self.assertTrue(all(isinstance(e, int) for e in p["evidence_turns"]))

    def test_answers_in_evidence_before_the_probe_and_nowhere_else(self):
        for _, name, t in self.traces():
            turns, n = t["turns"], len(t["turns"])
            for p in t["probes"]:
                i = p["after_turn"]
                self.assertIn(turns[i]["role"], ("tool", "user"))
                self.assertGreaterEqual(i, n / 2, name)   # after the middle
                for e in p["evidence_turns"]:
                    self.assertLess(e, i)
                    self.assertEqual(turns[e]["role"], "tool")
                    self.assertIn(p["answer"], turns[e]["content"])
                for j in range(i + 1):
                    if j not in p["evidence_turns"]:
                        self.assertNotIn(p["answer"].lower(), turns[j]["content"].lower(),
                                         "%s: probe %r found in turn %d" % (name, p, j))
            # One probe at the end: after the last research output (before submit_report).
            self.assertEqual(max(p["after_turn"] for p in t["probes"]), n - 4)

    def test_a_distractor_of_the_same_kind_precedes_each_probe(self):
        for _, name, t in self.traces():
            for p in t["probes"]:
                kinds = [k for k, tpl in gen.TEMPLATES.items()
                         if re.fullmatch(re.sub(r"\\\{\w+\\\}", "(.+?)", re.escape(tpl[3])),
                                         p["question"])]
                self.assertEqual(len(kinds), 1, p["question"])
                pattern = sentence_pattern(kinds[0])
                seen = "\n".join(x["content"] for x in t["turns"][:p["after_turn"] + 1]
                                 if x["role"] == "tool")
                planted = {m.group(0) for m in pattern.finditer(seen)}
                self.assertGreaterEqual(len(planted), 2, "%s: %s" % (name, p["question"]))

    def test_length_and_turn_bounds(self):
        for (mt, lo, hi), name, t in self.traces():
            self.assertLessEqual(gen.estimate_tokens(t), mt, name)
            self.assertTrue(lo <= len(t["turns"]) <= hi, name)
            for turn in t["turns"][:-3]:   # research outputs, not submit_report's confirmation
                if turn["role"] == "tool":
                    self.assertTrue(150 <= len(turn["content"].split()) <= 500, name)
        # The budget is used: 6000-token traces are mostly longer than 3000-token ones.
        mean = {mt: sum(gen.estimate_tokens(json.loads(d)) for d in self.runs[(mt, 10, 40)].values())
                / 40 for mt in (3000, 6000)}
        self.assertGreater(mean[3000], 2400)
        self.assertGreater(mean[6000], 4000)

    def test_estimate_by_hand(self):
        t = {"system": "s" * 36, "tools": [], "turns": [{"role": "user", "content": "u" * 72}],
             "probes": [{"question": "q" * 10, "answer": "a" * 8},
                        {"question": "q" * 30, "answer": "a" * 6}]}
        # chars: 36 + len("[]") + 72 + 36 = 146 -> ceil(146 / 3.6) = 41; messages: 1 + 1 + 2.
        self.assertEqual(gen.estimate_tokens(t), 41 + 8 * 4)

    def test_early_evidence(self):
        early = total = 0
        for _, name, t in self.traces():
            n = len(t["turns"])
            first = [p for p in t["probes"] if p["evidence_turns"][0] < n / 3]
            self.assertTrue(first, name)
            early += len(first)
            total += len(t["probes"])
            # The task's final steps need the earliest outputs: submit_report carries the goal
            # facts, which were planted in the first third.
            report = t["turns"][-3]["content"]
            self.assertTrue(report.startswith("submit_report(summary="))
            items = json.loads(report[len("submit_report(summary="):-1]).split("; ")
            self.assertEqual(len(items), 2)
            for item in items:
                value = item.rsplit(": ", 1)[1]
                self.assertIn(value, t["turns"][0]["content"] + "".join(
                    x["content"] for x in t["turns"][:n // 3 + 1] if x["role"] == "tool"))
                self.assertNotIn(value, t["turns"][0]["content"])
        self.assertTrue(0.35 <= early / total <= 0.65, early / total)

    def test_the_committed_example_is_the_generators(self):
        with tempfile.TemporaryDirectory() as d:
            files = generate(d, "--n", "1", "--seed", "0", "--max-tokens", "2500",
                             "--min-turns", "13", "--max-turns", "15")
        with open(os.path.join(ROOT, "docs", "eval", "agent-trace", "example.json"), "rb") as f:
            example = f.read()
        self.assertEqual(list(files.values()), [example])
        self.assertLessEqual(len(example), 12 * 1024)

    def test_refuses_a_budget_too_small(self):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, SCRIPT, "--out", d, "--locomo", LOCOMO, "--n", "1",
                                "--max-tokens", "800"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("fits in 800 tokens", r.stderr)


if __name__ == "__main__":
    unittest.main()
