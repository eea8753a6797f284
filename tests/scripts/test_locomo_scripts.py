#!/usr/bin/env python3
"""scripts/locomo_summary.py, scripts/locomo_paired.py and scripts/locomo_compare.py on answer
lines written by hand, against means computed by hand: null recall left out, categories apart,
tags, a question answered twice refused; the paired mean difference over the questions both
methods answered; the adjusted Rand index of two methods' episode routings against values known
by hand (a relabelling: 1; crossed halves: -1/2); two runs compared answer by answer (equal predictions, largest NLL gap)."""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def line(method, conv, index, category, recall, nll, f1=0.5):
    return json.dumps({"method": method, "conversation": conv, "index": index, "question": "q",
                       "gold": "g", "prediction": "p", "category": category, "f1": f1,
                       "bleu1": f1 / 2, "evidence_recall": recall, "answer_nll": nll,
                       "prefill_tokens_per_question": 10 * (index + 1),
                       "kv_len_decode": 100, "latency_s": 0.5})


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *args],
                          capture_output=True, text=True)


class LocomoScripts(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.a = os.path.join(self.dir.name, "a.jsonl")
        self.b = os.path.join(self.dir.name, "b.jsonl.gz")
        with open(self.a, "w") as f:
            f.write("\n".join([line("m", "c1", 0, 1, 1.0, 2.0), line("m", "c1", 1, 2, None, 4.0),
                               line("m", "c1", 2, 2, 0.5, 3.0), line("n", "c1", 0, 1, 0.0, 2.5),
                               line("n", "c1", 1, 2, None, 3.0)]) + "\n")
        with gzip.open(self.b, "wt") as f:
            f.write(line("m", "c2", 0, 4, 0.0, 1.0) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def test_summary_means_by_hand(self):
        out = os.path.join(self.dir.name, "s.json")
        r = run("locomo_summary.py", out, self.a, self.b, self.a + "@t", "--model", "x")
        self.assertEqual(r.returncode, 0, r.stderr)
        s = json.load(open(out))
        self.assertEqual(s["model"], "x")
        self.assertEqual(s["conversations"], ["c1", "c2"])
        m = s["methods"]["m"]
        self.assertEqual(m["questions"], 4)
        self.assertAlmostEqual(m["evidence_recall"], (1.0 + 0.5 + 0.0) / 3)  # null left out
        self.assertAlmostEqual(m["answer_nll"], (2.0 + 4.0 + 3.0 + 1.0) / 4)
        self.assertAlmostEqual(m["prefill_tokens_per_question"], (10 + 20 + 30 + 10) / 4)
        self.assertEqual(sorted(m["by_category"]), ["1", "2", "4"])
        self.assertAlmostEqual(m["by_category"]["2"]["answer_nll"], 3.5)
        self.assertAlmostEqual(m["by_category"]["2"]["evidence_recall"], 0.5)
        self.assertEqual(s["methods"]["m/t"]["questions"], 3)  # the tagged copy of a.jsonl
        self.assertAlmostEqual(s["methods"]["n"]["evidence_recall"], 0.0)

    def test_summary_refuses_a_question_answered_twice_and_bad_lines(self):
        out = os.path.join(self.dir.name, "s.json")
        r = run("locomo_summary.py", out, self.a, self.a)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("answered again", r.stderr)
        bad = os.path.join(self.dir.name, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"method": "m"}\n')
        r = run("locomo_summary.py", out, bad)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not an answer line", r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_paired_mean_difference_by_hand(self):
        r = run("locomo_paired.py", self.a, "--base", "m")
        self.assertEqual(r.returncode, 0, r.stderr)
        row = [l for l in r.stdout.splitlines() if l.startswith("| n ")]
        self.assertEqual(len(row), 1, r.stdout)
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        # n minus m over c1's questions 0 and 1: (2.5 - 2.0 + 3.0 - 4.0) / 2
        self.assertEqual(cells[1], "2")
        self.assertAlmostEqual(float(cells[2]), -0.25)

    def test_routing_agreement_is_the_adjusted_rand_index(self):
        def routed(method, conv, index, episode):
            r = json.loads(line(method, conv, index, 1, None, 1.0))
            r["episode"] = episode
            return json.dumps(r)

        path = os.path.join(self.dir.name, "r.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(
                [routed("m", "c", i, e) for i, e in enumerate([0, 0, 1, 1])] +
                [routed("same", "c", i, e) for i, e in enumerate([3, 3, 2, 2])] +
                [routed("cross", "c", i, e) for i, e in enumerate([0, 1, 0, 1])]) + "\n")
        r = run("locomo_paired.py", path, "--base", "m")
        self.assertEqual(r.returncode, 0, r.stderr)
        ari = {}
        table = r.stdout.split("adjusted Rand index of the questions' episodes")[1]
        for l in table.splitlines():
            cells = [c.strip() for c in l.strip("|").split("|")]
            if len(cells) == 3 and cells[0] in ("same", "cross"):
                ari[cells[0]] = float(cells[2])
        # Crossed halves: no pair grouped alike, 2 + 2 pairs expected of 6: (0 - 2/3) / (2 - 2/3).
        self.assertEqual(ari, {"same": 1.0, "cross": -0.5})


class LocomoCompare(unittest.TestCase):
    def test_counts_equal_predictions_and_the_largest_nll_gap(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a.jsonl"), os.path.join(d, "b.jsonl")
            with open(a, "w") as f:
                f.write(line("m", "c1", 0, 1, 1.0, 2.0) + "\n" + line("m", "c1", 1, 2, None, 4.0))
            changed = json.loads(line("m", "c1", 1, 2, None, 4.00003))
            changed["prediction"] = "other"
            with open(b, "w") as f:
                f.write(line("m", "c1", 0, 1, 1.0, 2.0) + "\n" + json.dumps(changed))
            r = run("locomo_compare.py", a, b)
            self.assertEqual(r.returncode, 0, r.stderr)
            row = [l for l in r.stdout.splitlines() if l.startswith("| m |")][0]
            cells = [c.strip() for c in row.strip("|").split("|")]
            self.assertEqual(cells[1:4], ["2", "1", "3.00e-05"])
            self.assertEqual(cells[6], "1 / 1")  # recall: the null one left out
            self.assertEqual(run("locomo_compare.py", a, b, "--nll-tol", "1e-4").returncode, 1)
            self.assertEqual(run("locomo_compare.py", a, a, "--nll-tol", "0").returncode, 0)


if __name__ == "__main__":
    unittest.main()
