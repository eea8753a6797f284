"""Structured output against a real `kvmem serve` (SmolLM2) through the official `openai`
client: `response_format` json_schema over 42 schemas of the compiler's subset
(engine/grammar/json_schema.h), sampled at temperature 1 with two seeds each; every output that
ended its turn must parse and validate with Python's `jsonschema`, and at most a few may run
out of tokens. The same requests without response_format are shown to fail (the test can
fail). Also json_object, the `grammar` extension on completions, and the 400 for a schema the
compiler refuses.

Strings and arrays carry maxLength / maxItems so a reply fits the small token budget that keeps
this test short.
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

import jsonschema  # noqa: E402
import openai  # noqa: E402

SERVER = None
MAX_TOKENS = 80
SEEDS = (1, 2)

S = {"type": "string", "maxLength": 12}
SCHEMAS = [
    {"type": "object", "properties": {"name": S}, "required": ["name"]},
    {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
     "required": ["x", "y"]},
    {"type": "object", "properties": {"nothing": {"type": "null"}}, "required": ["nothing"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
     "required": ["color"]},
    {"type": "object", "properties": {"kind": {"const": "point"}, "x": {"type": "integer"}},
     "required": ["kind", "x"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": S, "maxItems": 3}},
     "required": ["tags"]},
    {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"},
                                              "minItems": 2, "maxItems": 3}}, "required": ["ids"]},
    {"type": "object", "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 5}},
     "required": ["code"]},
    {"type": "object", "properties": {"a": S, "b": {"type": "integer"}}, "required": ["a"],
     "additionalProperties": False},
    {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, S]}}, "required": ["v"]},
    {"type": "object", "properties": {"v": {"oneOf": [{"type": "boolean"}, {"type": "null"}]}},
     "required": ["v"]},
    {"type": "object", "properties": {"p": {"$ref": "#/$defs/point"}}, "required": ["p"],
     "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"},
                                                         "y": {"type": "integer"}},
                         "required": ["x", "y"]}}},
    {"type": "object", "properties": {"p": {"$ref": "#/definitions/n"}}, "required": ["p"],
     "definitions": {"n": {"type": "number"}}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
    {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    {"type": "array", "items": S, "minItems": 2, "maxItems": 2},
    {"type": "string", "maxLength": 10},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"enum": [1, "two", None, True]},
    {"const": {"fixed": [1, 2]}},
    {"type": ["string", "null"], "maxLength": 8},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "name": S, "email": S}, "required": ["name", "email"]}}, "required": ["user"]},
    {"type": "object", "properties": {"items": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "properties": {"sku": S, "qty": {"type": "integer"}},
        "required": ["sku", "qty"]}}}, "required": ["items"]},
    {"type": "object", "properties": {"title": S, "done": {"type": "boolean"},
                                      "priority": {"enum": ["low", "high"]}},
     "required": ["title", "done", "priority"]},
    {"type": "object", "properties": {"m": {"type": "array", "maxItems": 2, "items": {
        "type": "array", "maxItems": 2, "items": {"type": "number"}}}}, "required": ["m"]},
    {"type": "object", "properties": {"answer": S, "confidence": {"type": "number"}},
     "required": ["answer", "confidence"], "title": "Answer", "description": "An answer"},
    {"type": "object", "properties": {"id": {"type": "integer"}, "note": S},
     "required": ["id"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"allOf": [{"type": "integer"}]}}, "required": ["a"]},
    {"type": "object", "properties": {"s": {"type": "string", "format": "date", "maxLength": 10}},
     "required": ["s"]},
    {"type": "object", "properties": {"status": {"anyOf": [{"const": "ok"}, {"type": "object",
        "properties": {"error": S}, "required": ["error"]}]}}, "required": ["status"]},
    {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"},
                                      "label": {"type": ["string", "null"], "maxLength": 10}},
     "required": ["lat", "lon", "label"]},
    {"type": "object", "properties": {"words": {"type": "array", "items": {"type": "string",
        "maxLength": 6}, "minItems": 1, "maxItems": 3}, "count": {"type": "integer"}},
     "required": ["words", "count"]},
    {"type": "object", "properties": {"flag": {"type": "boolean"}, "n": {"type": "null"},
                                      "e": {"enum": [0, 1]}}, "required": ["flag", "n", "e"]},
    {"type": "object", "properties": {"k": {"$ref": "#/$defs/key"}, "v": {"$ref": "#/$defs/key"}},
     "required": ["k", "v"], "$defs": {"key": {"type": "string", "maxLength": 4}}},
    {"type": "object", "properties": {"version": {"const": 2}, "data": {"type": "array",
        "maxItems": 2, "items": {"type": "boolean"}}}, "required": ["version", "data"]},
    {"type": "object", "properties": {"first": S, "last": S, "age": {"type": "integer"}},
     "required": ["first", "last", "age"], "additionalProperties": False},
    {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 2}]},
    {"type": "object", "properties": {"empty": {"type": "array", "maxItems": 0}},
     "required": ["empty"]},
]

# The subset's forms beside what the jsonschema validator checks: it validates each reply.
VALIDATOR = jsonschema.Draft202012Validator


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


def ask(schema, seed, constrained=True):
    kw = {}
    if constrained:
        kw["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "reply", "strict": True, "schema": schema}}
    r = oai().chat.completions.create(
        model="kvmem", max_tokens=MAX_TOKENS, temperature=1, seed=seed, messages=[
            {"role": "system", "content": "You reply with JSON only."},
            {"role": "user", "content": "A JSON value for this schema: " + json.dumps(schema)}],
        **kw)
    return r.choices[0].message.content, r.choices[0].finish_reason


def valid(schema, text):
    try:
        VALIDATOR(schema).validate(json.loads(text))
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


class StructuredOutputTest(unittest.TestCase):
    def test_schemas_hold_at_temperature_one(self):
        self.assertGreaterEqual(len(SCHEMAS), 40)
        for schema in SCHEMAS:
            VALIDATOR.check_schema(schema)
        cut = 0
        for i, schema in enumerate(SCHEMAS):
            for seed in SEEDS:
                text, finish = ask(schema, seed)
                if finish == "length":
                    cut += 1
                    continue
                self.assertEqual(finish, "stop")
                self.assertTrue(valid(schema, text), f"schema {i} seed {seed}: {text!r}")
        print(f"\n{len(SCHEMAS) * len(SEEDS)} constrained replies, {cut} cut off by max_tokens",
              file=sys.stderr)
        self.assertLessEqual(cut, len(SCHEMAS) * len(SEEDS) // 10, "too many replies cut off")

    def test_unconstrained_requests_fail_some(self):
        failed = sum(not valid(s, ask(s, SEEDS[0], constrained=False)[0]) for s in SCHEMAS[:6])
        print(f"\nunconstrained: {failed} of 6 replies invalid", file=sys.stderr)
        self.assertGreater(failed, 0)

    def test_json_object_and_grammar(self):
        c = oai()
        r = c.chat.completions.create(
            model="kvmem", max_tokens=MAX_TOKENS, temperature=1, seed=3,
            response_format={"type": "json_object"},
            messages=[{"role": "user", "content": "Describe a cat as JSON."}])
        if r.choices[0].finish_reason == "stop":
            self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
        for seed in SEEDS:
            t = c.completions.create(model="kvmem", prompt="Is water wet? Answer:", max_tokens=4,
                                     temperature=1, seed=seed,
                                     extra_body={"grammar": 'root ::= " " ("yes" | "no")'})
            self.assertIn(t.choices[0].text, (" yes", " no"))

    def test_each_of_n_choices_is_held(self):
        schema = SCHEMAS[27]
        r = oai().chat.completions.create(
            model="kvmem", max_tokens=MAX_TOKENS, temperature=1, seed=5, n=3,
            messages=[{"role": "user", "content": "A todo item as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
        self.assertEqual(len(r.choices), 3)
        for c in r.choices:
            if c.finish_reason == "stop":
                self.assertTrue(valid(schema, c.message.content), c.message.content)

    def test_refused_schema_is_a_400_naming_the_construct(self):
        with self.assertRaises(openai.BadRequestError) as e:
            ask({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}, 1)
        self.assertIn("minimum", str(e.exception))
        self.assertIn("response_format.json_schema.schema", str(e.exception))


if __name__ == "__main__":
    unittest.main()
