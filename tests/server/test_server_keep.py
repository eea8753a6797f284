"""The keep policy end to end over the real model: segments through the API, chats over them.

An agent created with the `keep` policy gets segments by PUT /v1/agents/{id}/segments/{name}
(urllib); a chat (the official openai client) reads them: the reply says where the key is, and
the turn's report lists the segments read. A segment replaced changes the answer. After a
restart of the server the segments are listed as they were written and the same question gets
the same greedy reply as before the restart. An agent of another policy is refused with a 400
that names keep; a segment deleted is gone (a second delete is a 404).
"""
import json
import os
import sys
import tempfile
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402

QUESTION = "Where is the kitchen key? Answer in a few words."


def put_segment(srv, agent, name, text):
    status, body = srv.request("PUT", f"/v1/agents/{agent}/segments/{urllib.parse.quote(name)}",
                               json.dumps({"text": text}), {"Content-Type": "application/json"})
    return status, json.loads(body)


def list_segments(srv, agent):
    status, body = srv.get(f"/v1/agents/{agent}/segments")
    assert status == 200, body
    return json.loads(body)["data"]


def ask(srv, agent):
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
    r = c.chat.completions.create(model="kvmem", messages=[{"role": "user", "content": QUESTION}],
                                  max_tokens=24, temperature=0, user=agent)
    return r.choices[0].message.content


class KeepTest(unittest.TestCase):
    def test_segments_chats_and_a_restart(self):
        server_util.skip_without_model()
        with tempfile.TemporaryDirectory() as store:
            with server_util.Server(store) as srv:
                status, agent = srv.post_json("/v1/agents",
                                              {"id": "house", "memory": {"policy": "keep"}})
                self.assertEqual(status, 200, agent)
                self.assertEqual(agent["memory"]["policy"], "keep")
                status, seg = put_segment(srv, "house", "kitchen",
                                          "The kitchen key is in the blue bowl.")
                self.assertEqual(status, 200, seg)
                self.assertEqual(seg["name"], "kitchen")
                self.assertEqual(seg["object"], "agent.segment")
                for name, text in [("garden", "The garden gate is painted green."),
                                   ("café", "The café opens at nine.")]:
                    self.assertEqual(put_segment(srv, "house", name, text)[0], 200)

                first = ask(srv, "house")
                self.assertIn("bowl", first.lower())
                status, body = srv.get("/v1/agents/house")
                report = json.loads(body)["last_turn"]
                self.assertEqual(report["segments_read"], ["kitchen", "garden", "café"])
                self.assertGreater(report["recomputed_share"], 0)

                self.assertEqual(put_segment(srv, "house", "kitchen",
                                             "The kitchen key is in the red drawer.")[0], 200)
                second = ask(srv, "house")
                self.assertIn("drawer", second.lower())
                self.assertNotIn("bowl", second.lower())

                # Another policy has no segments.
                self.assertEqual(srv.post_json("/v1/agents", {"id": "plain"})[0], 200)
                status, body = srv.get("/v1/agents/plain/segments")
                self.assertEqual(status, 400, body)
                self.assertIn("segments need the keep policy", body)
                # A bad name is a clear 400.
                status, body = srv.request("PUT", "/v1/agents/house/segments/a%2Fb",
                                           json.dumps({"text": "x"}))
                self.assertEqual(status, 400, body)
                self.assertIn("'/'", body)

            with server_util.Server(store) as srv:
                listed = list_segments(srv, "house")
                self.assertEqual([s["name"] for s in listed], ["kitchen", "garden", "café"])
                self.assertEqual(listed[0]["text"], "The kitchen key is in the red drawer.")
                self.assertEqual(ask(srv, "house"), second)
                status, body = srv.request("DELETE", "/v1/agents/house/segments/garden")
                self.assertEqual(status, 200, body)
                self.assertEqual(json.loads(body), {"object": "agent.segment.deleted",
                                                    "name": "garden", "deleted": True})
                self.assertEqual(srv.request("DELETE", "/v1/agents/house/segments/garden")[0], 404)
                self.assertEqual([s["name"] for s in list_segments(srv, "house")],
                                 ["kitchen", "café"])


if __name__ == "__main__":
    unittest.main()
