"""Goldens for the chat templates that render tools themselves: Llama 3.1's
(tokenizer/llama31_tools.h; tests/data/tokenizer/chat_templates/llama3.1*.jinja, llama3.2.jinja)
and Qwen 2.5/3's (tokenizer/qwen_tools.h; qwen2.5.jinja, qwen3.jinja), rendered with jinja2 as
transformers' apply_chat_template does, with custom tools, assistant tool_calls and tool results.
Tools are given with their keys in the order kvmem writes them (Llama: by name; Qwen: as OpenAI
sends them, type then function's name, description, parameters; schemas by name).

    ~/.cache/kvmem/venv/bin/python scripts/make_tool_template_vectors.py
writes tests/data/tokenizer/llama31_tool_vectors.json and qwen_tool_vectors.json.
"""
import json
import os

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LLAMA_TEMPLATES = ["llama3.1", "llama3.1-early", "llama3.2"]
QWEN_TEMPLATES = ["qwen2.5", "qwen3"]
HARMONY_DATE = "2026-01-15"  # strftime_now's, passed to kvmem as ChatTemplate::harmony_date


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' filter (jinja2's own escapes HTML characters)
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


TOOLS = [
    {"function": {"description": "Current weather in a city", "name": "get_weather",
                  "parameters": {"properties": {"city": {"type": "string"},
                                                "unit": {"enum": ["c", "f"]}},
                                 "required": ["city"], "type": "object"}},
     "type": "function"},
    {"function": {"name": "get_time", "parameters": {"properties": {}, "type": "object"}},
     "type": "function"},
]


def call(name, args, *more, content=None):
    calls = [(name, args)] + [(more[i], more[i + 1]) for i in range(0, len(more), 2)]
    m = {"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": n, "arguments": a}} for n, a in calls]}
    if content is not None:
        m["content"] = content
    return m


CONVERSATIONS = [
    [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": " Weather in Paris? "}],
    [{"role": "user", "content": "Weather in Paris?"},
     call("get_weather", {"city": "Paris", "unit": "c"}),
     {"role": "tool", "content": "18 C, sunny"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "Time?"},
     call("get_time", {}), {"role": "tool", "content": "12:00 \u00e9"},
     {"role": "assistant", "content": "It is noon."}, {"role": "user", "content": "Thanks"}],
]


QWEN_TOOLS = [{"type": "function", "function": t["function"]} for t in TOOLS]
for t in QWEN_TOOLS:  # name, description, parameters
    fn = t["function"]
    t["function"] = {k: fn[k] for k in ("name", "description", "parameters") if k in fn}

QWEN_CONVERSATIONS = CONVERSATIONS + [
    [{"role": "user", "content": "Weather in Paris and the time?"},
     call("get_weather", {"unit": "c", "city": "Paris"}, "get_time", {}, content="Checking."),
     {"role": "tool", "content": "18 C"}, {"role": "tool", "content": "{\"time\": \"12:00\"}"},
     {"role": "assistant", "content": "18 C at noon."}, {"role": "user", "content": "\u00e9t\u00e9?"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "Time?"}, call("get_time", {}),
     {"role": "tool", "content": "noon"}],
]

# Qwen3's template reads every assistant message's content: calls get "" (OpenAI's null).
QWEN_CONVERSATIONS = [[dict(m, content=m.get("content", "")) for m in c]
                      for c in QWEN_CONVERSATIONS]


# GPT-OSS's template reads every tool's description; kvmem writes the parameters' properties in
# name order.
HARMONY_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "The city"},
            "days": {"type": "integer", "default": 1},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}}}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "required": ["query"], "properties": {
            "filters": {"type": "object", "required": ["site"], "properties": {
                "site": {"type": "string"}, "year": {"type": "integer"}}},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "query": {"type": "string"},
            "ranges": {"type": "array", "items": {"type": "object", "properties": {
                "from": {"type": "number"}}}},
            "tags": {"type": ["string", "null"]}}}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time", "parameters": {
            "type": "object", "properties": {}}}},
]

HARMONY_CONVERSATIONS = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}],
    [{"role": "user", "content": "Weather in Paris?"},
     call("get_weather", {"city": "Paris", "unit": "c"}), {"role": "tool", "content": "18 C"}],
    [{"role": "user", "content": "Time?"}, call("get_time", {}, content="I should look."),
     {"role": "tool", "content": "{\"time\": \"12:00 \u00e9\"}"}],
    [{"role": "user", "content": "Time?"}, call("get_time", {}, content="I should look."),
     {"role": "tool", "content": "noon"}, {"role": "assistant", "content": "It is noon."},
     {"role": "user", "content": "Thanks"}],
]


def render_all(env, names, tools, conversations):
    cases = []
    for name in names:
        path = os.path.join(REPO, "tests", "data", "tokenizer", "chat_templates", name + ".jinja")
        with open(path, encoding="utf-8") as f:
            template = env.from_string(f.read())
        for messages in conversations:
            cases.append({"template": name, "messages": messages, "rendered": template.render(
                messages=messages, tools=tools, add_generation_prompt=True, bos_token="",
                eos_token="", documents=None)})
    return cases


def write(file_name, tools, cases):
    out = {"producer": {"tool": "jinja2", "version": jinja2.__version__,
                        "settings": "as make_tokenizer_vectors.py, with transformers' tojson "
                                    "filter and tools"},
           "tools": tools, "cases": cases}
    path = os.path.join(REPO, "tests", "data", "tokenizer", file_name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    write("llama31_tool_vectors.json", TOOLS,
          render_all(env, LLAMA_TEMPLATES, TOOLS, CONVERSATIONS))
    write("qwen_tool_vectors.json", QWEN_TOOLS,
          render_all(env, QWEN_TEMPLATES, QWEN_TOOLS, QWEN_CONVERSATIONS))
    env.globals["strftime_now"] = lambda fmt: HARMONY_DATE
    write("harmony_tool_vectors.json", HARMONY_TOOLS,
          render_all(env, ["gpt-oss"], HARMONY_TOOLS, HARMONY_CONVERSATIONS))


if __name__ == "__main__":
    main()
