"""`kvmem scenario run` end to end, against a running server and in-process: every later turn of
an agent extends its cached conversation; no agent's cache, nor the transcript, holds a phase it
was not in or another agent's template; permanent agents resume across runs and a server
restart, ephemeral ones are deleted; caching off prefills everything.

Replies are at most 2 tokens, so a model cannot repeat the markers (made-up strings of many
tokens) that the privacy checks look for: a marker found where it must not be was put there by
the runner."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

AB, AE, TEMPLATE = "Zq4815x92", "Kv7730w18", "Wp5521y07"
SCENARIO = f"""
name: secrets
max_tokens: 2
agents:
  - {{id: alice, name: Alice, system: "You are Alice. Answer briefly."}}
  - {{id: bob, name: Bob, system: "You are Bob. Answer briefly."}}
  - {{id: eve, name: Eve, system: "You are Eve. Answer briefly.", permanent: false}}
phases:
  - name: ab
    agents: [alice, bob]
    auto_rounds: 2
    prompt: "Alice and Bob whisper. The password is {AB}."
  - name: ae
    agents: [alice, eve]
    auto_rounds: 2
    prompt: "Alice and Eve whisper. The vault code is {AE}."
  - name: all
    agents: [alice, bob, eve]
    prompt: "Everyone meets."
    per_agent_prompt_templates:
      alice: "Your notes ({TEMPLATE}): ${{ab.messages[alice]}} / ${{ae.messages[alice]}}"
      bob: "Your notes: ${{ab.messages[bob]}}"
"""


def run_scenario(path, *args):
    out = subprocess.run([server_util.BIN, "scenario", "run", path, *args], capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise AssertionError(f"kvmem scenario run failed ({out.returncode}):\n{out.stderr}")
    return out


def stored_texts(store):
    """agent id -> the conversation text of its stored manifest."""
    texts = {}
    for path in glob.glob(os.path.join(store, "**", "manifest.json"), recursive=True):
        with open(path) as f:
            m = json.load(f)
        texts[m["agent_id"]] = m.get("text", "")
    return texts


class ScenarioTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.dir = tempfile.TemporaryDirectory()
        cls.yaml = os.path.join(cls.dir.name, "secrets.yaml")
        with open(cls.yaml, "w") as f:
            f.write(SCENARIO)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def load(self, name):
        with open(os.path.join(self.dir.name, name)) as f:
            return f.read()

    def assert_extends(self, report):
        """After an agent's first turn, each of its phases reads most of its prompt from cache."""
        seen = set()
        for phase in report["phases"]:
            for agent, a in phase["agents"].items():
                if agent in seen or a["turns"] > 1:
                    self.assertGreater(a["cached_tokens"], 0, (phase["name"], agent, a))
                if agent in seen:
                    self.assertLess(a["prefilled_tokens"], a["prompt_tokens"] / 2,
                                    (phase["name"], agent, a))
                self.assertEqual(a["prefilled_tokens"], a["prompt_tokens"] - a["cached_tokens"])
                seen.add(agent)

    def test_against_a_server_privacy_and_resume_across_a_restart(self):
        store = os.path.join(self.dir.name, "store")
        srv = server_util.Server(store)
        try:
            report_path = os.path.join(self.dir.name, "r1.json")
            run_scenario(self.yaml, "--server", srv.url, "--json", report_path,
                         "--transcript", os.path.join(self.dir.name, "t1.md"))
            r1 = json.loads(self.load("r1.json"))
            self.assertTrue(r1["caching"])
            self.assertEqual([p["name"] for p in r1["phases"]], ["ab", "ae", "all"])
            self.assertEqual(r1["phases"][0]["agents"]["bob"]["turns"], 2)
            self.assert_extends(r1)

            texts = stored_texts(store)
            alice, bob = texts["scenario/secrets/alice"], texts["scenario/secrets/bob"]
            for marker in (AB, AE, TEMPLATE):
                self.assertIn(marker, alice)
            self.assertIn(AB, bob)
            self.assertNotIn(AE, bob)        # phase ae, Bob was not there
            self.assertNotIn(TEMPLATE, bob)  # Alice's template
            self.assertNotIn("scenario/secrets/eve", texts)  # ephemeral: deleted
            status, _ = srv.request("GET", "/v1/agents/scenario%2Fsecrets%2Feve")
            self.assertEqual(status, 404)
            transcript = self.load("t1.md")
            self.assertIn("## ab", transcript)
            self.assertIn(AB, transcript)  # a phase's prompt is public to its transcript
            self.assertNotIn(TEMPLATE, transcript)
            status, body = srv.request("GET", "/v1/agents/scenario%2Fsecrets%2Falice")
            held = json.loads(body)["cached_tokens"]
            self.assertGreater(held, 0)
        finally:
            srv.stop()

        srv = server_util.Server(store)  # a restart: the permanent agents resume from the store
        try:
            run_scenario(self.yaml, "--server", srv.url, "--json",
                         os.path.join(self.dir.name, "r2.json"), "--transcript", os.devnull)
            r2 = json.loads(self.load("r2.json"))
            self.assertGreaterEqual(r2["phases"][0]["agents"]["alice"]["cached_tokens"], held)
            self.assert_extends(r2)
            texts = stored_texts(store)
            self.assertEqual(texts["scenario/secrets/alice"].count(AB), 2)  # both runs
            self.assertNotIn(AE, texts["scenario/secrets/bob"])
            self.assertNotIn("scenario/secrets/eve", texts)
        finally:
            srv.stop()

    def test_in_process_batched_and_with_caching_off(self):
        store = os.path.join(self.dir.name, "inproc")
        common = ["-m", server_util.MODEL, "--store", store, "-t", "2", "-c", "4096"]
        run_scenario(self.yaml, *common, "--batch", "--json",
                     os.path.join(self.dir.name, "on.json"), "--transcript", os.devnull)
        out = run_scenario(self.yaml, *common, "--no-cache", "--json",
                           os.path.join(self.dir.name, "off.json"))
        on, off = json.loads(self.load("on.json")), json.loads(self.load("off.json"))
        self.assertTrue(on["batch"])
        self.assert_extends(on)
        self.assertIn("# secrets (caching off)", out.stdout)  # the transcript on stdout
        self.assertFalse(off["caching"])
        self.assertEqual(off["totals"]["cached_tokens"], 0)
        self.assertEqual(off["totals"]["prefilled_tokens"], off["totals"]["prompt_tokens"])
        self.assertGreater(off["totals"]["prefilled_tokens"], 2 * on["totals"]["prefilled_tokens"])
        # Uncached agents are all deleted; the cached run's permanent ones stay.
        ids = set(stored_texts(store))
        self.assertEqual(ids, {"scenario/secrets/alice", "scenario/secrets/bob"})

    def test_bad_scenarios_fail_clearly(self):
        leak = SCENARIO.replace("${ab.messages[bob]}", "${ae.messages[alice]}")
        path = os.path.join(self.dir.name, "leak.yaml")
        with open(path, "w") as f:
            f.write(leak)
        out = subprocess.run([server_util.BIN, "scenario", "check", path], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 1)
        self.assertIn("would show 'bob' the private phase 'ae'", out.stderr)
        out = subprocess.run([server_util.BIN, "scenario", "check", self.yaml],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("secrets: 3 agents, 3 phases", out.stdout)


if __name__ == "__main__":
    unittest.main()
