"""Tools in the formats of the models' own chat templates, end to end through the official
`openai` client against a real `kvmem serve`: a tiny random-weight qwen2 file carrying Qwen 2.5's
template (its <tool_call> blocks) and a tiny llama file carrying Llama 3.1's ({"name",
"parameters"} JSON). Random weights write nothing sensible on their own, so every call here is
held by the grammar that tool_choice "required" or a named function asks for: what the test
checks is the chain around it, that the server recognized the template's format from the file,
rendered the tools in it, held the model to the tools' schemas in it (each call's arguments
validate with `jsonschema`), read the calls back with ids, streamed them, and rendered a call that
comes back byte for byte (the agent's next turn reuses the cache past the call).
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "oracle"))
import server_util  # noqa: E402
from make_tiny_gguf import write as write_tiny_gguf  # noqa: E402

import jsonschema  # noqa: E402
import openai  # noqa: E402

TEMPLATES = os.path.join(os.path.dirname(__file__), "..", "data", "tokenizer", "chat_templates")
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 8},
            "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
            "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {
            "hours": {"type": "integer", "enum": [9, 12, 18]}}, "required": ["hours"],
            "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MAX_TOKENS = 600  # random weights fill the JSON grammar's whitespace, a token per byte


def start_tiny_server(cls, arch, template):
    """A server over a tiny random `arch` file carrying the template tests/data has as
    `template`.jinja; sets cls.dir, cls.server, cls.client."""
    cls.dir = tempfile.TemporaryDirectory()
    model = os.path.join(cls.dir.name, arch + ".gguf")
    with open(os.path.join(TEMPLATES, template + ".jinja"), encoding="utf-8") as f:
        write_tiny_gguf(arch, model, wtype="F32", dim=256, chat_template=f.read())
    cls.server = server_util.Server(os.path.join(cls.dir.name, "store"), model=model, ctx=4096)
    cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0)


def stop_tiny_server(cls):
    cls.server.stop()
    cls.dir.cleanup()


class NativeFormat:
    """The checks, for a server whose model's template has the tool format under test."""
    arch = template = None

    setUpClass = classmethod(lambda cls: start_tiny_server(cls, cls.arch, cls.template))
    tearDownClass = classmethod(lambda cls: stop_tiny_server(cls))

    def create(self, **kw):
        kw = {"max_tokens": MAX_TOKENS, **kw}
        return self.client.chat.completions.create(model="kvmem", tools=TOOLS, temperature=1,
                                                   parallel_tool_calls=False, **kw)

    def check_call(self, name, arguments, allowed=SCHEMAS):
        self.assertIn(name, allowed)
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])

    def test_required_call_and_its_return(self):
        msgs = [{"role": "user", "content": "Weather in Paris?"}]
        agent = self.template + "-loop"
        r1 = self.create(messages=msgs, tool_choice="required", seed=3, user=agent)
        choice = r1.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls", choice)
        self.assertEqual(len(choice.message.tool_calls), 1)
        call = choice.message.tool_calls[0]
        self.assertTrue(call.id.startswith("call_"))
        self.check_call(call.function.name, call.function.arguments)

        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
        msgs.append({"role": "tool", "tool_call_id": call.id, "content": "18 C"})
        r2 = self.create(messages=msgs, tool_choice="required", seed=4, user=agent, max_tokens=4)
        # The call came back as the model wrote it: the cache holds past it (at most the end of
        # turn, which the template writes as text where the tiny vocabulary has no token for it,
        # and the token before it differ).
        self.assertGreaterEqual(r2.usage.prompt_tokens_details.cached_tokens,
                                r1.usage.prompt_tokens + r1.usage.completion_tokens - 2)

    def test_named_call_streamed(self):
        calls, finish = {}, None
        for chunk in self.create(messages=[{"role": "user", "content": "Time?"}], stream=True,
                                 tool_choice={"type": "function", "function": {"name": "get_time"}},
                                 seed=5):
            if not chunk.choices:
                continue
            ch = chunk.choices[0]
            self.assertFalse(ch.delta.content)
            for d in ch.delta.tool_calls or []:
                c = calls.setdefault(d.index, {"name": "", "arguments": ""})
                c["name"] += (d.function.name or "") if d.function else ""
                c["arguments"] += (d.function.arguments or "") if d.function else ""
            finish = ch.finish_reason or finish
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(list(calls), [0])
        self.check_call(calls[0]["name"], calls[0]["arguments"], allowed=["get_time"])

    def test_many_seeds_validate(self):
        for seed in range(6):
            r = self.create(messages=[{"role": "user", "content": "Go"}], tool_choice="required",
                            seed=100 + seed)
            self.assertEqual(r.choices[0].finish_reason, "tool_calls", r)
            for call in r.choices[0].message.tool_calls:
                self.check_call(call.function.name, call.function.arguments)


class HarmonyFormat(unittest.TestCase):
    """GPT-OSS's harmony: the tiny vocabulary has none of harmony's special tokens, so a random
    model cannot write a call; what is checked is that the server renders the tools and a call's
    return in the template's format (tests/serve/tool_harmony_test.cpp checks the text and the
    reader of replies)."""

    setUpClass = classmethod(lambda cls: start_tiny_server(cls, "gpt-oss", "gpt-oss"))
    tearDownClass = classmethod(lambda cls: stop_tiny_server(cls))

    def test_tools_and_results_are_rendered(self):
        msgs = [{"role": "user", "content": "Weather?"}]
        plain = self.client.chat.completions.create(model="kvmem", messages=msgs, max_tokens=2)
        with_tools = self.client.chat.completions.create(model="kvmem", messages=msgs,
                                                         tools=TOOLS, max_tokens=2)
        # The namespace and the system turn's line about the commentary channel, a token a byte.
        self.assertGreater(with_tools.usage.prompt_tokens, plain.usage.prompt_tokens + 300)
        msgs += [{"role": "assistant", "content": None, "tool_calls": [
                     {"id": "call_1", "type": "function",
                      "function": {"name": "get_time", "arguments": "{\"hours\": 9}"}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "9:00"}]
        after = self.client.chat.completions.create(model="kvmem", messages=msgs, tools=TOOLS,
                                                    max_tokens=2)
        self.assertGreater(after.usage.prompt_tokens, with_tools.usage.prompt_tokens + 100)
        with self.assertRaises(openai.BadRequestError):  # two calls in one message
            self.client.chat.completions.create(model="kvmem", tools=TOOLS, max_tokens=2,
                messages=msgs[:1] + [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "get_time",
                                                               "arguments": "{}"}}
                    for i in ("a", "b")]}])


class QwenFormat(NativeFormat, unittest.TestCase):
    arch, template = "qwen2", "qwen2.5"


class Llama31Format(NativeFormat, unittest.TestCase):
    arch, template = "llama", "llama3.1"


if __name__ == "__main__":
    unittest.main(verbosity=2)
