#!/usr/bin/env python3
"""A short soak (issue 29 §3): bench/soak.py for 2 minutes against a real `kvmem serve` (4
clients, 16 agents in two tenants, both dialects, streamed and not, disconnects on purpose,
conversations restarting, agents moving between the hot tier and the store under --hot-mib 24).
It fails on any status but 200 and the designed 429/503/529, a transport error, a stream cut
short, a damaged cache logged, a dead server, or server RSS after the warm-up (the first minute)
moving more than 10% from its value at the warm-up's end. The 30-minute run and its figures:
docs/reliability.md, "Load and soak". `scripts/test.sh --long` runs it."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
import server_util  # noqa: E402


class Soak(unittest.TestCase):
    def test_two_minutes_of_mixed_traffic(self):
        server_util.skip_without_model()
        with tempfile.TemporaryDirectory() as out:
            report = os.path.join(out, "soak.json")
            r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "soak.py"),
                                "--bin", server_util.BIN, "--minutes",
                                os.environ.get("KVMEM_SOAK_MINUTES", "2"), "--check",
                                "--json", report], timeout=900)
            with open(report) as f:
                print(f.read())
        self.assertEqual(r.returncode, 0, "the soak failed (its stderr says why)")


if __name__ == "__main__":
    unittest.main(verbosity=2)
