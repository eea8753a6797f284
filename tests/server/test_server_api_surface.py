"""The rest of the API surface against independent references: /tokenize and /detokenize against
Hugging Face `tokenizers` ids (tests/data/tokenizer/smollm2_vectors.json); Anthropic's
count_tokens, through the official client, against the usage of the same request; /v1/embeddings,
through the official OpenAI client (base64) and as floats, against sentence-transformers
(tests/data/embed/); CORS preflights with and without --cors-origin; error objects with OpenAI's
`param` and `code` and Anthropic's error types."""
import base64
import json
import os
import struct
import sys
import tempfile
import unittest

import anthropic
import openai

sys.path.insert(0, os.path.dirname(__file__))
import server_util  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "data")
MINILM = os.path.join(os.path.dirname(server_util.MODEL), "all-MiniLM-L6-v2")
ORIGIN = "http://app.example:3000"


def embed_goldens():
    """(encoder dir, golden json, golden vectors): MiniLM when installed, else the tiny BERT."""
    if os.path.isdir(MINILM):
        enc, name = MINILM, "minilm_embed"
    else:
        enc, name = os.path.join(DATA, "embed", "tiny"), "tiny_embed"
    with open(os.path.join(DATA, "embed", name + ".json")) as f:
        golden = json.load(f)
    with open(os.path.join(DATA, "embed", golden["embeddings"]), "rb") as f:
        raw = f.read()
    dim = golden["dim"]
    flat = struct.unpack(f"<{len(raw) // 4}f", raw)
    vectors = [flat[i * dim:(i + 1) * dim] for i in range(len(golden["cases"]))]
    return enc, golden, vectors


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na = sum(x * x for x in a) ** 0.5
    nb = sum(y * y for y in b) ** 0.5
    return dot / (na * nb)


class ApiSurfaceTest(unittest.TestCase):
    """One server with --cors-origin and an embedding model."""

    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.store = tempfile.TemporaryDirectory()
        cls.encoder, cls.golden, cls.vectors = embed_goldens()
        cls.srv = server_util.Server(cls.store.name, extra=[
            "--cors-origin", ORIGIN, "--embed-model", cls.encoder])
        cls.openai = openai.OpenAI(base_url=cls.srv.url + "/v1", api_key="unused")
        cls.anthropic = anthropic.Anthropic(base_url=cls.srv.url, api_key="unused")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.store.cleanup()

    def test_tokenize_matches_hf_tokenizers_and_round_trips(self):
        with open(os.path.join(DATA, "tokenizer", "smollm2_vectors.json")) as f:
            cases = json.load(f)["cases"]
        for case in cases:
            text = case["text"]
            status, got = self.srv.post_json("/tokenize", {"content": text})
            self.assertEqual(status, 200, got)
            self.assertEqual(got["tokens"], case["ids"], repr(text))
            status, plain = self.srv.post_json("/tokenize", {"content": text,
                                                             "parse_special": False})
            self.assertEqual(plain["tokens"], case["ids_no_special"], repr(text))
            status, back = self.srv.post_json("/detokenize", {"tokens": got["tokens"]})
            self.assertEqual(status, 200, back)
            self.assertEqual(back["content"], text)
        # Pieces: text, or the bytes of a character split across tokens.
        text = "emoji 🤗 and 媽"
        status, got = self.srv.post_json("/tokenize", {"content": text, "with_pieces": True,
                                                       "add_special": True})
        self.assertEqual(status, 200, got)
        joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                          for p in got["tokens"])
        self.assertEqual(joined.decode(), text)
        self.assertTrue(all(set(p) == {"id", "piece"} for p in got["tokens"]))
        status, err = self.srv.post_json("/detokenize", {"tokens": [1, 10 ** 9]})
        self.assertEqual((status, err["error"]["param"]), (400, "tokens[1]"), err)

    def test_count_tokens_equals_the_usage_of_the_request(self):
        tools = [{"name": "get_weather", "description": "Weather of a city",
                  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
        for extra in [{}, {"system": "You are terse."}, {"system": "Be brief.", "tools": tools}]:
            messages = [{"role": "user", "content": "What is the weather in Paris today?"}]
            counted = self.anthropic.messages.count_tokens(model="kvmem", messages=messages,
                                                           **extra)
            reply = self.anthropic.messages.create(model="kvmem", max_tokens=1,
                                                   messages=messages, **extra)
            # Anthropic's input_tokens leave out cache reads (requests without an agent share
            # prefixes through the prefix cache): the prompt is both together.
            prompt = reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0)
            self.assertEqual(counted.input_tokens, prompt, extra)
            self.assertGreater(counted.input_tokens, 10)

    def test_embeddings_equal_sentence_transformers(self):
        texts = [c["text"] for c in self.golden["cases"]]
        # The official client asks for base64 and decodes it.
        got = self.openai.embeddings.create(model="any", input=texts)
        self.assertEqual(len(got.data), len(texts))
        self.assertEqual(got.model, os.path.basename(self.encoder))
        self.assertEqual(got.usage.prompt_tokens,
                         sum(min(len(c["ids"]), 256) for c in self.golden["cases"]))
        status, floats = self.srv.post_json("/v1/embeddings", {"input": texts,
                                                               "encoding_format": "float"})
        self.assertEqual(status, 200, floats)
        for i, (want, a, b) in enumerate(zip(self.vectors, got.data, floats["data"])):
            self.assertEqual((a.index, b["index"]), (i, i))
            self.assertEqual(a.embedding, b["embedding"])  # base64 and float agree exactly
            self.assertGreater(cosine(a.embedding, want), 0.99999, texts[i][:40])
            self.assertLess(max(abs(x - y) for x, y in zip(a.embedding, want)), 1e-4)
        one = self.openai.embeddings.create(model="any", input=texts[1], encoding_format="float")
        self.assertEqual(one.data[0].embedding, floats["data"][1]["embedding"])
        status, err = self.srv.post_json("/v1/embeddings", {"input": texts[1], "dimensions": 7})
        self.assertEqual((status, err["error"]["param"]), (400, "dimensions"), err)
        status, err = self.srv.post_json("/v1/embeddings", {"input": [[1, 2]]})
        self.assertEqual((status, err["error"]["param"]), (400, "input"), err)

    def test_cors_preflight_and_response_headers(self):
        status, _, headers = self.srv.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-stainless-os"},
            with_headers=True)
        self.assertEqual(status, 204)
        self.assertEqual(headers["Access-Control-Allow-Origin"], ORIGIN)
        self.assertIn("POST", headers["Access-Control-Allow-Methods"])
        self.assertIn("content-type", headers["Access-Control-Allow-Headers"])
        status, text, headers = self.srv.request("POST", "/v1/chat/completions", json.dumps({
            "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}),
            {"Origin": ORIGIN, "Content-Type": "application/json"}, with_headers=True)
        self.assertEqual(status, 200, text)
        self.assertEqual(headers["Access-Control-Allow-Origin"], ORIGIN)
        # Another site gets nothing from the preflight, and its direct calls are refused.
        status, _, headers = self.srv.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
            with_headers=True)
        self.assertIsNone(headers["Access-Control-Allow-Origin"])
        status, err = self.srv.post_json("/v1/messages", {"max_tokens": 2, "messages": [
            {"role": "user", "content": "hi"}]}, {"Origin": "http://evil.example"})
        self.assertEqual((status, err["error"]["type"]), (403, "permission_error"), err)

    def test_openai_errors_carry_param_and_code(self):
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.openai.chat.completions.create(model="kvmem", messages=[
                {"role": "user", "content": "word " * 6000}], max_tokens=4)
        self.assertEqual(ctx.exception.code, "context_length_exceeded")
        self.assertEqual(ctx.exception.param, "messages")
        self.assertEqual(ctx.exception.type, "invalid_request_error")
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.openai.completions.create(model="kvmem", prompt="word " * 6000, max_tokens=4)
        self.assertEqual((ctx.exception.code, ctx.exception.param),
                         ("context_length_exceeded", "prompt"))
        status, err = self.srv.post_json("/v1/chat/completions", {
            "messages": [{"role": "wizard", "content": "hi"}]})
        self.assertEqual((status, err["error"]["param"]), (400, "messages[0].role"), err)
        status, err = self.srv.post_json("/v1/chat/completions", {
            "max_tokens": "x", "messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(err["error"]["param"], "max_tokens", err)
        self.assertIsNone(err["error"]["code"])


class NoFlagsTest(unittest.TestCase):
    """A server with an API key, no --cors-origin and no embedding model."""

    @classmethod
    def setUpClass(cls):
        server_util.skip_without_model()
        cls.store = tempfile.TemporaryDirectory()
        cls.home = tempfile.TemporaryDirectory()  # no models here: no default encoder
        cls.srv = server_util.Server(cls.store.name, extra=["--api-key", "k"],
                                     env={"KVMEM_HOME": cls.home.name})

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.store.cleanup()
        cls.home.cleanup()

    def test_preflight_gets_no_allow_headers(self):
        status, _, headers = self.srv.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST"}, with_headers=True)
        self.assertEqual(status, 204)
        for h in ["Access-Control-Allow-Origin", "Access-Control-Allow-Methods",
                  "Access-Control-Allow-Headers"]:
            self.assertIsNone(headers[h], h)
        # The server's own origin is not cross-origin.
        own = {"Origin": self.srv.url, "Authorization": "Bearer k"}
        self.assertEqual(self.srv.post_json("/tokenize", {"content": "hi"}, own)[0], 200)

    def test_anthropic_error_types(self):
        client = anthropic.Anthropic(base_url=self.srv.url, api_key="wrong", max_retries=0)
        with self.assertRaises(anthropic.AuthenticationError) as ctx:
            client.messages.create(model="k", max_tokens=2,
                                   messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(ctx.exception.body["error"]["type"], "authentication_error")
        client = anthropic.Anthropic(base_url=self.srv.url, api_key="k", max_retries=0)
        with self.assertRaises(anthropic.BadRequestError) as ctx:
            client.messages.create(model="k", max_tokens=2, messages=[
                {"role": "user", "content": "word " * 6000}])
        self.assertEqual(ctx.exception.body["error"]["type"], "invalid_request_error")
        with self.assertRaises(anthropic.NotFoundError) as ctx:
            client.post("/v1/messages/batches", cast_to=object, body={})
        self.assertEqual(ctx.exception.body["error"]["type"], "not_found_error")
        status, err = self.srv.post_json("/v1/messages", {"max_tokens": 2, "messages": [
            {"role": "user", "content": "hi"}]}, {"x-api-key": "k", "Origin": "http://evil.example"})
        self.assertEqual((status, err["error"]["type"]), (403, "permission_error"), err)

    def test_embeddings_without_a_model_say_how_to_get_one(self):
        status, err = self.srv.post_json("/v1/embeddings", {"input": "hi"},
                                         {"Authorization": "Bearer k"})
        self.assertEqual(status, 400, err)
        self.assertEqual(err["error"]["param"], "model")
        self.assertIn("--embed-model", err["error"]["message"])


if __name__ == "__main__":
    unittest.main()
