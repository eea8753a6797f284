"""OpenAI's Responses API against a real `kvmem serve`, with the official `openai` client.

A chain of responses is one agent: each continuation by previous_response_id reuses the KV cache
of the response it continues (usage.input_tokens_details.cached_tokens) without the client
resending anything, also after the server was killed with SIGKILL and started again on the same
store. Streaming (responses.stream and create(stream=True)), retrieve, delete, store=False and
branches (two responses continuing the same one) are checked on the restarted server.
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import openai  # noqa: E402

INSTRUCTIONS = "You are a helpful assistant. Answer in one short sentence."
ARGS = dict(model="kvmem", instructions=INSTRUCTIONS, max_output_tokens=16, temperature=0)


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


class ResponsesTest(unittest.TestCase):
    def assertContinues(self, after, before):
        """`after` reused all of `before`'s prompt and reply from the agent's cache (all but the
        last sampled token, which was never fed back), and prefilled little more."""
        cached = after.usage.input_tokens_details.cached_tokens
        self.assertGreaterEqual(cached, before.usage.input_tokens + before.usage.output_tokens - 1,
                                (after.usage, before.usage))
        self.assertLess(after.usage.input_tokens - cached, 40, after.usage)

    def test_chain_across_sigkill(self):
        server_util.skip_without_model()
        with tempfile.TemporaryDirectory() as store:
            first = server_util.Server(store)
            c = client(first)
            r1 = c.responses.create(input="Hi! My dog is called Biscuit and she loves the beach.",
                                    **ARGS)
            self.assertTrue(r1.id.startswith("resp_"))
            self.assertEqual(r1.object, "response")
            self.assertIn(r1.status, ("completed", "incomplete"))
            self.assertTrue(r1.output_text)
            self.assertEqual(r1.usage.input_tokens_details.cached_tokens, 0)
            r2 = c.responses.create(input="What should I pack for a beach day with her?",
                                    previous_response_id=r1.id, **ARGS)
            self.assertEqual(r2.previous_response_id, r1.id)
            self.assertTrue(r2.output_text)
            self.assertContinues(r2, r1)
            first.kill()

            with server_util.Server(store) as second:
                c = client(second)
                r3 = c.responses.create(input="Remind me, what is my dog's name?",
                                        previous_response_id=r2.id, **ARGS)
                self.assertContinues(r3, r2)  # warm from the store, nothing resent
                log = second.stderr()
                self.assertNotIn("stored cache not used", log)

                got = c.responses.retrieve(r1.id)  # records survive the crash
                self.assertEqual(got.id, r1.id)
                self.assertEqual(got.output_text, r1.output_text)
                self.assertEqual(c.responses.retrieve(r3.id).output_text, r3.output_text)

                # The stream helper: the final response is the deltas put together.
                with c.responses.stream(input="And what does she love?",
                                        previous_response_id=r3.id, **ARGS) as stream:
                    deltas = "".join(e.delta for e in stream
                                     if e.type == "response.output_text.delta")
                    final = stream.get_final_response()
                self.assertTrue(deltas)
                self.assertEqual(final.output_text, deltas)
                self.assertContinues(final, r3)
                self.assertEqual(c.responses.retrieve(final.id).output_text, deltas)

                # create(stream=True): the raw events in order.
                events = list(c.responses.create(input="Thanks!", previous_response_id=final.id,
                                                 stream=True, **ARGS))
                types = [e.type for e in events]
                self.assertEqual(types[:4], ["response.created", "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added"])
                self.assertIn(types[-1], ("response.completed", "response.incomplete"))
                self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
                text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
                done = events[-1].response
                self.assertEqual(done.output_text, text)
                self.assertEqual(c.responses.retrieve(done.id).output_text, text)
                self.assertContinues(done, final)

                # Branches: two responses continuing the same one both answer.
                b1 = c.responses.create(input="Name a colour.", previous_response_id=r1.id, **ARGS)
                b2 = c.responses.create(input="Name a number.", previous_response_id=r1.id, **ARGS)
                for b in (b1, b2):
                    self.assertTrue(b.output_text)
                    self.assertEqual(b.previous_response_id, r1.id)
                    self.assertEqual(c.responses.retrieve(b.id).output_text, b.output_text)
                # (A branch sharing less than min_diverge_ratio of the agent's conversation is
                # prefilled again.) Back to the first branch: when the second diverged from it,
                # the agent kept it as a checkpoint (on_diverge "fork"), which resumes it.
                b3 = c.responses.create(input="Why?", previous_response_id=b1.id, **ARGS)
                self.assertContinues(b3, b1)

                # Delete, then 404; store=False keeps nothing.
                c.responses.delete(b2.id)
                with self.assertRaises(openai.NotFoundError):
                    c.responses.retrieve(b2.id)
                self.assertEqual(c.responses.retrieve(b1.id).id, b1.id)
                unstored = c.responses.create(input="Say hi.", store=False, **ARGS)
                self.assertTrue(unstored.output_text)
                self.assertFalse(unstored.store)
                with self.assertRaises(openai.NotFoundError):
                    c.responses.retrieve(unstored.id)
                with self.assertRaises(openai.NotFoundError):
                    c.responses.create(input="x", previous_response_id="resp_unknown", **ARGS)
                with self.assertRaises(openai.BadRequestError):
                    c.responses.create(input=[], **ARGS)


    def test_function_tools(self):
        server_util.skip_without_model()
        tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]}}]
        args = dict(model="kvmem", tools=tools, max_output_tokens=64, temperature=0)
        with tempfile.TemporaryDirectory() as store, server_util.Server(store) as srv:
            c = client(srv)
            r1 = c.responses.create(input="What is the weather in Paris?", tool_choice="required",
                                    **args)
            calls = [o for o in r1.output if o.type == "function_call"]
            self.assertEqual(len(calls), 1, r1.output)
            self.assertEqual(calls[0].name, "get_weather")
            self.assertIn("city", json.loads(calls[0].arguments))
            self.assertTrue(calls[0].call_id)

            # The call's output continues the chain: the call was rendered as the model wrote it.
            r2 = c.responses.create(input=[{"type": "function_call_output",
                                            "call_id": calls[0].call_id, "output": "Sunny, 21 C"}],
                                    previous_response_id=r1.id, tool_choice="none", **args)
            self.assertEqual(r2.status, "completed", r2)
            self.assertTrue(r2.output_text)
            self.assertContinues(r2, r1)

            # Streamed: the helper puts the call's argument deltas together.
            with c.responses.stream(input="And in Rome?", previous_response_id=r2.id,
                                    tool_choice="required", **args) as stream:
                deltas = "".join(e.delta for e in stream
                                 if e.type == "response.function_call_arguments.delta")
                final = stream.get_final_response()
            call = [o for o in final.output if o.type == "function_call"][0]
            self.assertEqual(call.arguments, deltas)
            self.assertEqual(c.responses.retrieve(final.id).output[-1].arguments, deltas)

if __name__ == "__main__":
    unittest.main(verbosity=2)
