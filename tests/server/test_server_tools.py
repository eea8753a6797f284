"""Tool calls through the official `openai` and `anthropic` clients and LangChain, against a
real `kvmem serve` (SmolLM2): a loop over two tools (the model calls one, gets its result,
answers), whole and streamed, in both dialects; the agent's second turn reuses the first
turn's cache (the call is rendered back byte for byte); LangChain's bind_tools and
with_structured_output.

The first turn forces a call (tool_choice required / any) and the second forbids one (none),
so a 135M model's reply is a call or an answer where the loop needs one; auto is covered by
the unit tests (tests/serve/tool_calls_test.cpp) and by LangChain's default.
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import anthropic  # noqa: E402
import openai  # noqa: E402

SERVER = None
GREEDY = {"temperature": 0}
MAX_TOKENS = 48

OAI_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"]}}},
]
CLAUDE_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                 "input_schema": t["function"]["parameters"]} for t in OAI_TOOLS]
RESULTS = {"get_weather": "18 C and sunny", "get_time": "14:05"}
QUESTION = "What is the weather in Paris?"


def setUpModule():
    global SERVER, STORE
    server_util.skip_without_model()
    STORE = tempfile.TemporaryDirectory()
    SERVER = server_util.Server(STORE.name)


def tearDownModule():
    SERVER.stop()
    STORE.cleanup()


def oai():
    return openai.OpenAI(base_url=SERVER.url + "/v1", api_key="unused", max_retries=0)


def claude():
    return anthropic.Anthropic(base_url=SERVER.url, api_key="unused", max_retries=0)


def oai_streamed(client, **kw):
    """A streamed chat completion folded back into (content, tool calls, finish_reason)."""
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        content += ch.delta.content or ""
        for d in ch.delta.tool_calls or []:
            call = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
            if d.id:
                call["id"] = d.id
            if d.function and d.function.name:
                call["name"] = d.function.name
            if d.function and d.function.arguments:
                call["arguments"] += d.function.arguments
        finish = ch.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


class OpenAiToolLoop(unittest.TestCase):
    def loop(self, stream, agent):
        c = oai()
        msgs = [{"role": "user", "content": QUESTION}]
        kw = dict(model="kvmem", tools=OAI_TOOLS, max_tokens=MAX_TOKENS, temperature=0, user=agent)
        if stream:
            _, calls, finish = oai_streamed(c, messages=msgs, tool_choice="required", **kw)
        else:
            r1 = c.chat.completions.create(messages=msgs, tool_choice="required", **kw)
            finish = r1.choices[0].finish_reason
            calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
                     for t in r1.choices[0].message.tool_calls]
        self.assertEqual(finish, "tool_calls")
        self.assertGreaterEqual(len(calls), 1)
        for call in calls:
            self.assertTrue(call["id"].startswith("call_"))
            self.assertIn(call["name"], RESULTS)
            self.assertIsInstance(json.loads(call["arguments"])["city"], str)
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": t["id"], "type": "function",
             "function": {"name": t["name"], "arguments": t["arguments"]}} for t in calls]})
        for t in calls:
            msgs.append({"role": "tool", "tool_call_id": t["id"], "content": RESULTS[t["name"]]})
        r2 = c.chat.completions.create(messages=msgs, tool_choice="none", **kw)
        self.assertEqual(r2.choices[0].finish_reason, "stop", r2)
        self.assertTrue(r2.choices[0].message.content)
        self.assertFalse(r2.choices[0].message.tool_calls)
        if not stream:
            # The second turn continues the first one's cache: the call came back as written.
            self.assertGreaterEqual(r2.usage.prompt_tokens_details.cached_tokens,
                                    r1.usage.prompt_tokens + r1.usage.completion_tokens - 2)

    def test_loop_whole(self):
        self.loop(stream=False, agent="oai-tools")

    def test_loop_streamed(self):
        self.loop(stream=True, agent="oai-tools-stream")

    def test_named_tool_choice(self):
        r = oai().chat.completions.create(
            model="kvmem", messages=[{"role": "user", "content": QUESTION}], tools=OAI_TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_time"}},
            max_tokens=MAX_TOKENS, temperature=0)
        calls = r.choices[0].message.tool_calls
        self.assertEqual([t.function.name for t in calls], ["get_time"])


class AnthropicToolLoop(unittest.TestCase):
    def loop(self, stream, agent):
        c = claude()
        msgs = [{"role": "user", "content": QUESTION}]
        kw = dict(model="kvmem", tools=CLAUDE_TOOLS, max_tokens=MAX_TOKENS, extra_body=GREEDY,
                  metadata={"user_id": agent})
        if stream:
            with c.messages.stream(messages=msgs, tool_choice={"type": "any"}, **kw) as s:
                r1 = s.get_final_message()
        else:
            r1 = c.messages.create(messages=msgs, tool_choice={"type": "any"}, **kw)
        self.assertEqual(r1.stop_reason, "tool_use")
        uses = [b for b in r1.content if b.type == "tool_use"]
        self.assertGreaterEqual(len(uses), 1)
        for u in uses:
            self.assertTrue(u.id.startswith("toolu_"))
            self.assertIn(u.name, RESULTS)
            self.assertIsInstance(u.input["city"], str)
        msgs.append({"role": "assistant", "content": [b.model_dump() for b in r1.content]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": RESULTS[u.name]} for u in uses]})
        if stream:
            with c.messages.stream(messages=msgs, tool_choice={"type": "none"}, **kw) as s:
                r2 = s.get_final_message()
        else:
            r2 = c.messages.create(messages=msgs, tool_choice={"type": "none"}, **kw)
        self.assertEqual(r2.stop_reason, "end_turn")
        text = "".join(b.text for b in r2.content if b.type == "text")
        self.assertTrue(text)
        # The call came back as it was written: the second turn read the first turn's cache.
        self.assertGreaterEqual(r2.usage.cache_read_input_tokens,
                                r1.usage.input_tokens + r1.usage.output_tokens - 2)

    def test_loop_whole(self):
        self.loop(stream=False, agent="claude-tools")

    def test_loop_streamed(self):
        self.loop(stream=True, agent="claude-tools-stream")


class LangChainTest(unittest.TestCase):
    def setUp(self):
        try:
            from langchain_openai import ChatOpenAI
        except ImportError:
            self.skipTest("langchain-openai missing (scripts/install_deps.sh)")
        self.llm = ChatOpenAI(base_url=SERVER.url + "/v1", api_key="unused", model="kvmem",
                              temperature=0, max_tokens=MAX_TOKENS, max_retries=0)

    def test_bind_tools(self):
        from langchain_core.tools import tool

        @tool
        def get_weather(city: str) -> str:
            """Current weather in a city."""
            return RESULTS["get_weather"]

        @tool
        def get_time(city: str) -> str:
            """Local time in a city."""
            return RESULTS["get_time"]

        msg = self.llm.bind_tools([get_weather, get_time], tool_choice="any").invoke(QUESTION)
        self.assertGreaterEqual(len(msg.tool_calls), 1)
        self.assertIn(msg.tool_calls[0]["name"], RESULTS)
        self.assertIsInstance(msg.tool_calls[0]["args"]["city"], str)

    def test_with_structured_output(self):
        from pydantic import BaseModel, Field

        class City(BaseModel):
            name: str = Field(max_length=20)
            country: str = Field(max_length=20)
            population: int

        # Numbers may take 16 digits, one token each: a budget the JSON fits in.
        from langchain_openai import ChatOpenAI
        llm = ChatOpenAI(base_url=SERVER.url + "/v1", api_key="unused", model="kvmem",
                         temperature=0, max_tokens=128, max_retries=0)
        for method in ("json_schema", "function_calling"):
            city = llm.with_structured_output(City, method=method).invoke("Describe Paris as JSON.")
            self.assertIsInstance(city, City, method)
            self.assertIsInstance(city.population, int)


if __name__ == "__main__":
    unittest.main()
