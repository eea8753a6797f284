"""Timelines of streamed chat completions and their statistics, for bench/concurrency.

A stream's timeline is what the client saw: when it sent the request, and the arrival time of
each SSE line of the reply (`data: {...}` chunks of /v1/chat/completions with stream=true, as
OpenAI, kvmem and llama-server send them). Times are seconds from any common origin
(time.perf_counter()). Standard library only: tests/scripts/test_sse_timing.py checks it on
hand-made timelines, without a server.

Definitions (the same for every server):
- TTFT: first chunk with content minus the send time.
- inter-token gaps: between consecutive content chunks of one stream (a chunk that carries
  several tokens counts as one arrival, as a user sees it).
- tokens: the server's usage.completion_tokens when it sends usage, else the content chunks.
- per-stream rate: (tokens - 1) / (last content - first content), the decode rate after the
  first token (the paper's per-stream decode TPS); None under 2 tokens.
- aggregate rate of a group started together: all tokens / (last content of any stream - the
  earliest send).
- percentiles: linear interpolation between the closest ranks (numpy's default).
"""
import json
import math


def parse_sse(lines):
    """Arrivals of one SSE reply. lines: (time, text line) pairs as read from the socket.
    Returns {"content": [(time, text)], "usage": dict or None, "finish_reason", "done",
    "errors": [payloads with an "error"]}; comments, blank lines and other fields are ignored."""
    out = {"content": [], "usage": None, "finish_reason": None, "done": False, "errors": [],
           "timings": None}
    for t, line in lines:
        line = line.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            out["done"] = True
            continue
        try:
            chunk = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            out["errors"].append(chunk["error"])
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        if chunk.get("timings"):  # llama-server's own figures (cache_n, prompt_n, ...)
            out["timings"] = chunk["timings"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content")
            if text:
                out["content"].append((t, text))
            if choice.get("finish_reason"):
                out["finish_reason"] = choice["finish_reason"]
    return out


def percentile(values, p):
    """The p-th percentile (0..100) of values, linearly interpolated; None when empty."""
    xs = sorted(values)
    if not xs:
        return None
    rank = (len(xs) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def stream_stats(t_send, parsed):
    """Figures of one stream: ttft, gaps, tokens, rate, first and last arrival."""
    times = [t for t, _ in parsed["content"]]
    usage = parsed.get("usage") or {}
    tokens = usage.get("completion_tokens")
    if not isinstance(tokens, int) or tokens < len(times) or (tokens > 0 and not times):
        tokens = len(times)
    s = {"tokens": tokens, "chunks": len(times), "ttft": None, "gaps": [], "rate": None,
         "t_send": t_send, "t_first": None, "t_last": None,
         "prompt_tokens": usage.get("prompt_tokens"),
         "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
         "finish_reason": parsed.get("finish_reason")}
    if times:
        s["t_first"], s["t_last"] = times[0], times[-1]
        s["ttft"] = times[0] - t_send
        s["gaps"] = [b - a for a, b in zip(times, times[1:])]
        if tokens >= 2 and times[-1] > times[0]:
            s["rate"] = (tokens - 1) / (times[-1] - times[0])
    return s


def group_stats(streams):
    """Figures of streams started together (a burst): aggregate and per-stream rates, TTFT and
    inter-token gap percentiles over all streams. streams: stream_stats() results."""
    ok = [s for s in streams if s["t_last"] is not None]
    total = sum(s["tokens"] for s in ok)
    g = {"streams": len(streams), "streams_ok": len(ok), "tokens": total,
         "tokens_per_stream": total / len(ok) if ok else None, "wall_s": None,
         "aggregate_tps": None}
    if ok:
        t0 = min(s["t_send"] for s in streams)
        g["wall_s"] = max(s["t_last"] for s in ok) - t0
        if g["wall_s"] > 0:
            g["aggregate_tps"] = total / g["wall_s"]
    rates = [s["rate"] for s in ok if s["rate"] is not None]
    ttfts = [s["ttft"] for s in ok]
    gaps = [x for s in ok for x in s["gaps"]]
    g["stream_tps_p50"] = percentile(rates, 50)
    g["stream_tps_min"] = min(rates) if rates else None
    g["ttft_p50"], g["ttft_p99"] = percentile(ttfts, 50), percentile(ttfts, 99)
    g["itl_p50"], g["itl_p99"] = percentile(gaps, 50), percentile(gaps, 99)
    g["itl_max"] = max(gaps) if gaps else None
    return g
