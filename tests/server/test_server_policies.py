"""Memory policies through the API with the official clients, over the real model.

GET /v1/policies lists every policy with its config's defaults and bounds (read with the openai
and anthropic clients' generic requests); an unknown policy or a bad config is a 400 whose message
names the valid policies or the field; the request shape before policies ("memory":
"retrieval" with "retrieval" settings) still creates a memart agent; an h2o agent's turns read
at most its budget of history rows per (layer, KV head) while its prompt keeps matching the
cache (cached_tokens grow); `kvmem serve --memory memart` gives agents a chat request creates
the memart policy, with this model's shipped preset (retrieval heads); `kvmem calibrate memart`
on a small conversation writes a preset of valid heads that then overrides the shipped one.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import anthropic  # noqa: E402
import openai  # noqa: E402


def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


class PoliciesTest(unittest.TestCase):
    def test_policies_agents_and_errors(self):
        server_util.skip_without_model()
        with tempfile.TemporaryDirectory() as store, server_util.Server(store) as srv:
            c = client(srv.url)
            listed = c.get("/policies", cast_to=object)
            names = [p["name"] for p in listed["data"]]
            self.assertEqual(names,
                             ["none", "full", "memart", "h2o", "epicache", "intentkv", "keep"])
            memart = listed["data"][2]
            self.assertEqual(memart["config"]["top_k"]["min"], 1)
            self.assertEqual(memart["config"]["preset"]["default"], "auto")
            # This model's preset ships: the heads evaluated on LoCoMo.
            self.assertEqual(len(memart["presets"]["model"]["heads"]), 5)
            a = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
            self.assertEqual(a.get("/v1/policies", cast_to=object)["data"][3]["name"], "h2o")

            with self.assertRaises(openai.BadRequestError) as bad:
                c.post("/agents", body={"id": "x", "memory": {"policy": "episodic"}},
                       cast_to=object)
            self.assertIn("none, full, memart, h2o, epicache, intentkv, keep", str(bad.exception))
            with self.assertRaises(openai.BadRequestError) as bad:
                c.post("/agents", body={"id": "x", "memory": {"policy": "h2o",
                                                              "config": {"budget": 0}}},
                       cast_to=object)
            self.assertIn("'budget'", str(bad.exception))

            old = c.post("/agents", body={"id": "old", "memory": "retrieval",
                                          "retrieval": {"top_k": 8}}, cast_to=object)
            self.assertEqual(old["memory"]["policy"], "memart")
            self.assertEqual(old["memory"]["config"]["top_k"], 8)
            self.assertEqual(old["memory"]["config"]["preset"], "model")

            made = c.post("/agents", body={"id": "hal", "memory": {
                "policy": "h2o", "config": {"budget": 64}}}, cast_to=object)
            self.assertEqual(made["memory"]["config"], {"budget": 64, "recent_ratio": 0.5})
            messages = [{"role": "user", "content":
                         "Here is a long note about my week. " + "I walked the dog. " * 40}]
            cached = []
            for turn in range(3):
                r = c.chat.completions.create(model="kvmem", messages=messages, max_tokens=8,
                                              temperature=0, user="hal")
                cached.append(r.usage.prompt_tokens_details.cached_tokens)
                report = c.get("/agents/hal", cast_to=object)["last_turn"]
                if turn > 0:  # the history is longer than the budget: each list reads 64
                    self.assertLessEqual(report["history_rows_read"], 64)
                messages += [{"role": "assistant", "content": r.choices[0].message.content},
                             {"role": "user", "content": "And then? " * (turn + 1)}]
            self.assertEqual(cached[0], 0)
            self.assertGreater(cached[2], cached[1])  # hidden rows keep their place: prefix hits

    def test_serve_memory_sets_the_default_policy(self):
        server_util.skip_without_model()
        with tempfile.TemporaryDirectory() as store:
            with server_util.Server(store, extra=["--memory", "memart",
                                                  "--memory-config", '{"top_k": 16}']) as srv:
                c = client(srv.url)
                r = c.chat.completions.create(
                    model="kvmem", messages=[{"role": "user", "content": "Hi, I am Mo."}],
                    max_tokens=8, temperature=0, user="mo")
                self.assertTrue(r.choices[0].message.content)
                mo = c.get("/agents/mo", cast_to=object)
                self.assertEqual(mo["memory"]["policy"], "memart")
                self.assertEqual(mo["memory"]["config"]["top_k"], 16)
                self.assertEqual(mo["memory"]["config"]["strategy"], "softmax-max-exact")
                self.assertEqual(mo["last_turn"]["preset"], "model")
            with self.assertRaises(RuntimeError) as failed:
                server_util.Server(store, extra=["--memory", "nope"])
            self.assertIn("none, full, memart, h2o, epicache, intentkv, keep", str(failed.exception))

    def test_calibrate_writes_the_preset_agents_then_use(self):
        server_util.skip_without_model()
        facts = ["I keep my bike in the blue shed.", "My sister Rita lives in Porto.",
                 "The spare key is under the red pot.", "I play the cello on Sundays.",
                 "My cat Pixel hates the vacuum.", "I bought a green car in 2009."] * 3
        turns = [{"speaker": "Ann" if i % 2 == 0 else "Bo", "dia_id": f"D1:{i + 1}", "text": t}
                 for i, t in enumerate(facts)]
        conv = {"sample_id": "tiny", "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1 May, 2023",
            "session_1": turns},
            "qa": [{"question": "Where is the spare key?", "answer": "under the red pot",
                    "evidence": ["D1:3"], "category": 4},
                   {"question": "Where does Rita live?", "answer": "Porto",
                    "evidence": ["D1:2"], "category": 4}]}
        with tempfile.TemporaryDirectory() as store:
            data = os.path.join(store, "tiny.json")
            with open(data, "w") as f:
                json.dump(conv, f)
            run = subprocess.run([server_util.BIN, "calibrate", "memart", "-m", server_util.MODEL,
                                  "--store", store, "--data", data, "--heads", "3", "-t", "2"],
                                 capture_output=True, text=True, timeout=600)
            self.assertEqual(run.returncode, 0, run.stderr)
            written = re.search(r"(\S+memart-[0-9a-f]{32}\.json) written", run.stderr).group(1)
            with open(written) as f:
                preset = json.load(f)
            self.assertEqual(len(preset["heads"]), 3)
            for h in preset["heads"]:
                layer, head = map(int, h.split("."))
                self.assertTrue(0 <= layer < 30 and 0 <= head < 9, h)  # SmolLM2: 30 x 9
            self.assertEqual(preset["strategy"], "softmax-max-exact")
            with server_util.Server(store) as srv:
                c = client(srv.url)
                memart = c.get("/policies", cast_to=object)["data"][2]
                self.assertEqual(memart["presets"]["model"], preset)
                made = c.post("/agents", body={"id": "cal", "memory": {"policy": "memart"}},
                              cast_to=object)
                self.assertEqual(made["memory"]["config"]["heads"], preset["heads"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
