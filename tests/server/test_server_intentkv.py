"""An `intentkv` agent driven through a 30-turn tool-use trace with the OpenAI client, real model.

The trace comes from scripts/gen_agent_traces.py (deterministic seed). The client resends the
whole conversation each request, as agent frameworks do: the trace's user task and tool outputs
(sent as user messages), and the model's own replies as the assistant turns. Once the history
passes the agent's budget, every request prunes rows; dead slots keep the kept rows in place, so
each request must still find at least 90% of what it resends in the agent's cache
(`usage.prompt_tokens_details.cached_tokens` against the previous request's prompt and reply),
while the rows the reply reads stay within the budget plus the forced span (`last_turn`).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUDGET = 1024


def make_trace(out):
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_agent_traces.py"),
                    "--out", out, "--n", "1", "--seed", "7", "--min-turns", "30",
                    "--max-turns", "30", "--max-tokens", "7000"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(glob.glob(os.path.join(out, "*.json"))[0]) as f:
        return json.load(f)


class IntentKvTraceTest(unittest.TestCase):
    def test_thirty_turns_keep_the_prefix_cached(self):
        server_util.skip_without_model()
        if not os.path.isdir(os.environ.get("KVMEM_LOCOMO", os.path.join(
                ROOT, "..", "shared", "data", "locomo"))):
            self.skipTest("the LoCoMo data the trace generator reads is not here")
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as store, \
                server_util.Server(store, ctx=8192) as srv:
            trace = make_trace(tmp)
            self.assertEqual(len(trace["turns"]), 30)
            c = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
            made = c.post("/agents", body={"id": "scout", "memory": {
                "policy": "intentkv", "config": {"budget": BUDGET}}}, cast_to=object)
            self.assertEqual(made["memory"]["config"]["scorer"], "intentkv")
            messages = [{"role": "system", "content":
                         trace["system"] + "\n\nTools:\n" + json.dumps(trace["tools"])}]
            previous = 0  # rows the agent held after the last request: its prompt and reply
            shares, pruned = [], 0
            for turn in trace["turns"]:
                if turn["role"] == "assistant":
                    continue  # the model's own reply stands for it
                content = turn["content"]
                if turn["role"] == "tool":
                    content = "Tool result (" + turn.get("name", "tool") + "):\n" + content
                messages.append({"role": "user", "content": content})
                r = c.chat.completions.create(model="kvmem", messages=messages, max_tokens=12,
                                              temperature=0, user="scout")
                cached = r.usage.prompt_tokens_details.cached_tokens
                report = c.get("/agents/scout", cast_to=object)["last_turn"]
                if previous > 0:
                    shares.append(cached / previous)
                pruned += report["dropped_rows"]
                self.assertLessEqual(report["live_rows"],
                                     max(BUDGET, report["forced_rows"]) + 1, report)
                messages.append({"role": "assistant", "content": r.choices[0].message.content})
                previous = r.usage.prompt_tokens + r.usage.completion_tokens
            print(f"intentkv trace: {len(shares) + 1} requests, {pruned} rows pruned, cached share "
                  f"of the resent conversation min {min(shares):.3f} mean "
                  f"{sum(shares) / len(shares):.3f}", file=sys.stderr)
            self.assertEqual(len(shares), 14)
            self.assertGreater(pruned, 0)  # the trace outgrew the budget
            self.assertGreaterEqual(min(shares), 0.9, shares)


if __name__ == "__main__":
    unittest.main()
