"""Goldens for Llama 3.1's native tool rendering (tokenizer/llama31_tools.h): the official
templates (tests/data/tokenizer/chat_templates/llama3.1*.jinja, llama3.2.jinja) rendered with
jinja2 as transformers' apply_chat_template does, with custom tools, assistant tool_calls and
tool results. Tools are given with their keys in name order, as kvmem serializes them.

    ~/.cache/kvmem/venv/bin/python scripts/make_llama31_tool_vectors.py
writes tests/data/tokenizer/llama31_tool_vectors.json.
"""
import json
import os

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TEMPLATES = ["llama3.1", "llama3.1-early", "llama3.2"]


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


def call(name, args):
    return {"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": name, "arguments": args}}]}


CONVERSATIONS = [
    [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": " Weather in Paris? "}],
    [{"role": "user", "content": "Weather in Paris?"},
     call("get_weather", {"city": "Paris", "unit": "c"}),
     {"role": "tool", "content": "18 C, sunny"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "Time?"},
     call("get_time", {}), {"role": "tool", "content": "12:00 \u00e9"},
     {"role": "assistant", "content": "It is noon."}, {"role": "user", "content": "Thanks"}],
]


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    cases = []
    for name in TEMPLATES:
        path = os.path.join(REPO, "tests", "data", "tokenizer", "chat_templates", name + ".jinja")
        with open(path, encoding="utf-8") as f:
            template = env.from_string(f.read())
        for messages in CONVERSATIONS:
            cases.append({"template": name, "messages": messages, "rendered": template.render(
                messages=messages, tools=TOOLS, add_generation_prompt=True, bos_token="",
                eos_token="", documents=None)})
    out = {"producer": {"tool": "jinja2", "version": jinja2.__version__,
                        "settings": "as make_tokenizer_vectors.py, with transformers' tojson "
                                    "filter and tools"},
           "tools": TOOLS, "cases": cases}
    path = os.path.join(REPO, "tests", "data", "tokenizer", "llama31_tool_vectors.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
