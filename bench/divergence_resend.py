"""A diverging request, then the original conversation resent (issue "memory never lost").

Starts a kvmem server on a temporary store, holds a 12-turn conversation with agent `ada`, sends
an unrelated request under the same agent (the conversation becomes a checkpoint), then resends
the original conversation with a new question, and the same request to a fresh agent. Prints the
X-Kvmem-Divergence headers, prompt and cached tokens, and each request's time (max_tokens 1).

    ~/.cache/kvmem/venv/bin/python bench/divergence_resend.py
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
import server_util  # noqa: E402

import openai  # noqa: E402

FACTS = ["The shed key hangs on the third hook.", "The boat is called Marlin and sleeps four.",
         "Dinner on Friday is at the harbour inn.", "The ferry leaves at seven sharp."] * 3


def chat(client, user, messages, max_tokens=8, **extra):
    t0 = time.time()
    raw = client.chat.completions.with_raw_response.create(
        model="kvmem", messages=messages, user=user, max_tokens=max_tokens, temperature=0,
        extra_body=extra or None)
    return raw.parse(), raw.headers.get("x-kvmem-divergence"), time.time() - t0


def main():
    with tempfile.TemporaryDirectory() as d, server_util.Server(os.path.join(d, "store")) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        messages = [{"role": "system", "content": "You are a careful assistant."}]
        for fact in FACTS:
            messages.append({"role": "user", "content": f"Please remember: {fact} " * 3})
            reply, _, _ = chat(client, "ada", messages)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        other = [{"role": "user", "content": "Unrelated: two plus two?"}]
        reply, header, _ = chat(client, "ada", other, max_tokens=1)
        print(f"diverging request: {header}")
        resent = messages + [{"role": "user", "content": "Where does the key hang?"}]
        for user in ("ada", "fresh"):
            reply, header, seconds = chat(client, user, resent, max_tokens=1)
            u = reply.usage
            print(f"{user:>5}: {u.prompt_tokens_details.cached_tokens} of {u.prompt_tokens} prompt "
                  f"tokens cached, {seconds:.3f} s, header {header}")


if __name__ == "__main__":
    main()
