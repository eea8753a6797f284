#!/usr/bin/env python3
"""Generates multi-turn tool-use traces for `kvmem eval agent-trace` (docs/eval/agent-trace.md).

    scripts/gen_agent_traces.py --out DIR [--n 20] [--min-turns 10] [--max-turns 40]
                                [--max-tokens 6000] [--seed 0] [--locomo DIR]

Writes DIR/<id>.json, one trace each: a task (turns[0]), then assistant tool calls (plain text,
`search(query="...")`) and long tool outputs (LoCoMo dialogue excerpts as search results,
documents and logs, 150-500 words each), an occasional user follow-up, and the final steps:
`submit_report(...)` with the facts the task asked for, its one-line confirmation, and a closing
assistant turn. Facts are planted as sentences from a small grammar (entity, attribute, made-up
value): the task's two goal facts in the earliest tool outputs, further probe facts in the first
and middle thirds, and distractors (same attribute, other entity; one before each probe). 2-4 probes per trace
ask for a planted value after the middle and at the last research output; each answer occurs,
before the probe, only in its evidence turn. Deterministic: trace i depends only on (--seed, i).
Length: estimate_tokens() <= --max-tokens. Standard library only.
"""
import argparse
import glob
import json
import math
import os
import random
import re
import sys

LOCOMO = "/work/shared/data/locomo"
CHARS_PER_TOKEN, TOKENS_PER_MESSAGE = 3.6, 8
MIN_WORDS, MAX_WORDS = 150, 500   # words per research tool output, planted facts included

SYSTEM = ("You are a research assistant working for one user. You have tools for searching and "
          "reading a shared archive of notes, documents and chat logs. Call one tool per turn, "
          "written as plain text, for example search(query=\"...\"). Tool results can be long; "
          "keep track of the facts the task needs, then file them with submit_report.")


def fn(name, description, props, required):
    return {"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": props, "required": required}}}


TOOLS = [
    fn("search", "Search the shared archive; returns matching excerpts.",
       {"query": {"type": "string", "description": "keywords"}}, ["query"]),
    fn("open_document", "Open an archived document by id and return its text.",
       {"doc_id": {"type": "string"}}, ["doc_id"]),
    fn("read_log", "Read a chat log from a given line on.",
       {"session": {"type": "integer"}, "from_line": {"type": "integer"}}, ["session"]),
    fn("submit_report", "File the final report for the task.",
       {"summary": {"type": "string", "description": "the requested facts"}}, ["summary"]),
]

# ---------------------------------------------------------------- the fact grammar
SYL = ["ka", "vor", "lin", "dre", "mo", "sel", "tav", "ri", "bel", "gur", "nox", "pel", "zan",
       "quo", "rho", "ster", "mav", "ul", "fen", "dax", "ors", "tel", "wim", "bra", "kes"]
FIRST = ["Orla", "Teodor", "Ysolde", "Bram", "Ilka", "Castor", "Mireth", "Joss", "Vela", "Rufin",
         "Sabeth", "Odo", "Lenka", "Piran", "Ansel", "Tamsin", "Eamon", "Zuzka", "Quill", "Ferro"]
TITLES = ["Dr.", "Ms.", "Mr.", "Prof."]
PLACES = ["north archive", "east vault", "river depot", "glass annex", "old boathouse",
          "west stairwell", "seed library", "tool shed", "map room", "lower cellar",
          "clock tower", "print shop", "salt barn", "night office", "pump house", "copper lab"]
OBJECTS = ["front door", "reading lamp", "supply cabinet", "long bench", "ceiling beam",
           "mail slot", "window frame", "notice board"]
EVENTS = ["budget review", "site visit", "board meeting", "safety drill", "vendor call",
          "quarterly audit", "design review", "press briefing", "volunteer training"]
TEAMS = ["logistics", "archive", "fundraising", "outreach", "repair", "catering", "survey"]
ORGS = ["the harbor authority", "the seed bank", "the night school", "the glass guild",
        "the ferry cooperative", "the tenants' union", "the weather station", "the choir board",
        "the chess club", "the lantern society", "the river trust"]
PROJECTS = ["roof repair", "garden expansion", "library move", "bridge survey", "mural project",
            "kiosk rebuild", "orchard fence", "pier lighting", "archive scan", "well cleanup"]
COLORS = ["teal", "ochre", "maroon", "lavender", "olive green", "mustard yellow", "slate grey",
          "coral", "indigo", "saffron", "burgundy", "mint green", "charcoal", "apricot"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]


def made_up(rng, n=2):
    return "".join(rng.choice(SYL) for _ in range(n)).capitalize()


def person(rng):
    return rng.choice(TITLES) + " " + made_up(rng) + rng.choice(["", "er", "ik", "ov", "an"])


VALUES = {
    "num4": lambda r: str(r.randint(1000, 9999)),
    "date": lambda r: "%s %d" % (r.choice(MONTHS), r.randint(2, 28)),
    "color": lambda r: r.choice(COLORS),
    "city": lambda r: made_up(r) + r.choice(["ford", "holm", "grad", "mere", "vale", "wick"]),
    "code": lambda r: "%s%s-%d" % (r.choice("BDFHKMPRTVXZ"), r.choice("ACELNQSW"),
                                   r.randint(1000, 9999)),
    "name": lambda r: r.choice(FIRST) + " " + made_up(r) + r.choice(["", "e", "ski", "son"]),
    "amount": lambda r: "{:,}".format(r.randint(12, 98) * 250),
}
# name: (entity slots, value kind, planted sentence, probe question, what the task asks for)
TEMPLATES = {
    "access_code": ({"place": PLACES}, "num4", "The access code for the {place} is {v}.",
                    "What is the access code for the {place}?", "the access code for the {place}"),
    "moved_event": ({"p": None, "event": EVENTS}, "date", "{p} moved the {event} to {v}.",
                    "To what date did {p} move the {event}?",
                    "the date to which {p} moved the {event}"),
    "repainted": ({"obj": OBJECTS, "place": PLACES}, "color",
                  "The {obj} in the {place} was repainted {v}.",
                  "What color was the {obj} in the {place} repainted?",
                  "the new color of the {obj} in the {place}"),
    "relocated": ({"p": None, "team": TEAMS}, "city", "{p} relocated the {team} team to {v}.",
                  "To which city did {p} relocate the {team} team?",
                  "the city to which {p} relocated the {team} team"),
    "tracking": ({"p": None}, "code", "The tracking number for {p}'s parcel is {v}.",
                 "What is the tracking number for {p}'s parcel?",
                 "the tracking number for {p}'s parcel"),
    "liaison": ({"org": ORGS}, "name", "The new liaison for {org} is {v}.",
                "Who is the new liaison for {org}?", "the name of the new liaison for {org}"),
    "budget": ({"proj": PROJECTS}, "amount", "The budget for the {proj} was capped at {v} credits.",
               "At how many credits was the budget for the {proj} capped?",
               "the budget cap for the {proj}"),
}


class Facts:
    """Draws facts with unique (template, entities) keys and values found nowhere else."""

    def __init__(self, rng, forbidden_text):
        self.rng, self.text, self.keys, self.values = rng, forbidden_text, set(), []

    def new(self, template=None):
        rng = self.rng
        if template is None:   # the least used kind, so that no entity pool runs out
            uses = {t: sum(k[0] == t for k in self.keys) for t in sorted(TEMPLATES)}
            template = rng.choice([t for t in uses if uses[t] == min(uses.values())])
        name = template
        slots, kind, sentence, question, need = TEMPLATES[name]
        for _ in range(1000):
            ent = {s: (rng.choice(pool) if pool else person(rng)) for s, pool in slots.items()}
            key = (name,) + tuple(sorted(ent.items()))
            if key not in self.keys:
                break
        for _ in range(1000):
            v = VALUES[kind](rng)
            low = v.lower()
            if low not in self.text and all(low not in o and o not in low for o in self.values):
                break
        if key in self.keys or low in self.values:
            raise RuntimeError("fact pools exhausted (%s)" % name)
        self.keys.add(key)
        self.values.append(low)
        return {"template": name, "value": v, "sentence": sentence.format(v=v, **ent),
                "question": question.format(**ent), "need": need.format(**ent),
                "entity": " ".join(ent.values())}


# ---------------------------------------------------------------- LoCoMo passages
def load_conversations(d):
    convs = []
    for path in sorted(glob.glob(os.path.join(d, "conv-*.json"))):
        with open(path, encoding="utf-8") as f:
            c = json.load(f)
        utts = []
        n = 1
        while "session_%d" % n in c:
            date = c.get("session_%d_date_time" % n, "")
            for u in c["session_%d" % n]:
                text = u["text"]
                if u.get("blip_caption"):
                    text += " [shares a photo of %s]" % u["blip_caption"]
                utts.append({"session": n, "date": date, "speaker": u["speaker"], "text": text})
            n += 1
        name = os.path.splitext(os.path.basename(path))[0]
        every = " ".join(u["text"] + " " + u["date"] for u in utts).lower()
        convs.append({"name": name, "utts": utts, "text": every})
    if not convs:
        sys.exit("no conv-*.json in %s" % d)
    return convs


def words(s):
    return len(s.split())


def render_tool(conv, spec, target_words):
    """A research tool output: header, LoCoMo lines from spec['start'], planted facts."""
    utts = conv["utts"]
    first = utts[spec["start"] % len(utts)]
    tool = spec["tool"]
    if tool == "search":
        head = "Top excerpts for %s (%s, %s):" % (json.dumps(spec["query"]), conv["name"],
                                                  first["date"])
    elif tool == "open_document":
        head = "Document %s, notes of %s:" % (spec["doc"], first["date"])
    else:
        head = "Chat log, session %d (%s), from line %d:" % (first["session"], first["date"],
                                                            spec["line"])
    facts = [f["sentence"] for f in spec["facts"]]
    budget = target_words - words(head) - sum(words(f) for f in facts)
    lines, i, cut = [], spec["start"], False
    while budget > 0:
        u = utts[i % len(utts)]
        line = "%s: %s" % (u["speaker"], u["text"])
        if words(line) > budget:   # the last line cut short, "[...]" its last word
            line, cut = " ".join(line.split()[:budget - 1]), True
        lines.append(line)
        budget -= words(line) + cut
        i += 1
    for pos, sentence in sorted(zip(spec["positions"], facts), key=lambda x: x[0]):
        k = max(0, min(int(pos * len(lines)), len(lines) - 1 - cut))   # not on a cut line
        lines[k] = lines[k].rstrip() + " " + sentence
    return head + "\n" + "\n".join(lines) + (" [...]" if cut else "")


def call_text(spec):
    if spec["tool"] == "search":
        return "search(query=%s)" % json.dumps(spec["query"])
    if spec["tool"] == "open_document":
        return "open_document(doc_id=%s)" % json.dumps(spec["doc"])
    return "read_log(session=%d, from_line=%d)" % (spec["session"], spec["line"])


def estimate_tokens(trace):
    """ceil(chars / 3.6) + 8 per message over the system prompt, json.dumps(tools), every turn,
    and the longest probe (question and answer, two messages)."""
    chars = len(trace["system"]) + len(json.dumps(trace["tools"])) + sum(
        len(t["content"]) for t in trace["turns"])
    probe = max((len(p["question"]) + len(p["answer"]) for p in trace["probes"]), default=0)
    msgs = 1 + len(trace["turns"]) + (2 if trace["probes"] else 0)
    return math.ceil((chars + probe) / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * msgs


# ---------------------------------------------------------------- one trace
def plan(rng, conv, n_turns):
    """Roles, tool specs, planted facts and probes for a trace of n_turns turns."""
    follow = n_turns % 2 + (2 if n_turns >= 20 and rng.random() < 0.5 else 0)
    n_research = (n_turns - 4 - follow) // 2
    after = set(rng.sample(range(1, n_research - 1), follow)) if follow else set()
    roles = ["user"]
    tool_idx = []
    for r in range(n_research):
        roles += ["assistant", "tool"]
        tool_idx.append(len(roles) - 1)
        if r in after:
            roles.append("user")
    roles += ["assistant", "tool", "assistant"]
    assert len(roles) == n_turns
    n, end = n_turns, tool_idx[-1]
    early = [r for r, i in enumerate(tool_idx) if i < n / 3]
    middle = [r for r, i in enumerate(tool_idx) if n / 3 <= i < 2 * n / 3 and i < end]
    facts = Facts(rng, conv["text"])
    specs = [{"facts": [], "positions": []} for _ in range(n_research)]

    def plant(f, r):
        specs[r]["facts"].append(f)
        f["turn"] = tool_idx[r]

    goals = [facts.new() for _ in range(2)]
    for g in goals:
        plant(g, rng.choice(early[:3]))
    k = rng.randint(2, 4)
    n_early = k // 2 if k != 3 else rng.choice([1, 2])
    targets = []
    for j in range(k):
        if j < n_early or not middle:
            pick = [g for g in goals if g not in targets]
            if pick and rng.random() < 0.5:
                targets.append(rng.choice(pick))
                continue
            f, r = facts.new(), rng.choice(early)
        else:
            f, r = facts.new(), rng.choice(middle)
        plant(f, r)
        targets.append(f)
    slots = [i for i, role in enumerate(roles) if role in ("tool", "user") and n / 2 <= i <= end]
    probes, seen_by = [], {}
    for j, f in enumerate(targets):
        later = [i for i in slots if i > f["turn"]]
        at = end if j == len(targets) - 1 or not later else rng.choice(later)
        seen_by[id(f)] = at
        probes.append({"after_turn": at, "question": f["question"], "answer": f["value"],
                       "evidence_turns": [f["turn"]]})
    probes.sort(key=lambda p: (p["after_turn"], p["evidence_turns"]))
    # A distractor of the same kind (other entity, other value) for each asked or goal fact,
    # in a tool output the probe sees; then background facts of any kind.
    for f in targets + [g for g in goals if g not in targets]:
        seen = [r for r, i in enumerate(tool_idx) if i <= seen_by.get(id(f), end)]
        plant(facts.new(f["template"]), rng.choice(seen))
    for r in range(n_research):
        if rng.random() < 0.5:
            plant(facts.new(), r)
    utts = conv["utts"]
    for r, s in enumerate(specs):
        s["positions"] = [rng.random() for _ in s["facts"]]
        s["start"] = rng.randrange(len(utts))
        s["jitter"] = rng.uniform(0.75, 1.25)
        s["tool"] = rng.choice(["search", "search", "open_document", "read_log"])
        u = utts[s["start"]]
        s["doc"] = "%s/session-%d/%d" % (conv["name"], u["session"], rng.randint(1, 40))
        s["session"], s["line"] = u["session"], rng.randint(1, 30)
        topical = [f for f in s["facts"] if f in goals or f in targets]
        if topical and rng.random() < 0.6:
            s["query"] = rng.choice(topical)["entity"]
        else:
            cand = sorted({w.strip(".,!?'\"()").lower() for w in u["text"].split()
                           if len(w.strip(".,!?'\"()")) >= 6 and w.isascii()})
            s["query"] = " ".join(rng.sample(cand, min(2, len(cand)))) or u["speaker"]
    followups = []
    for _ in after:
        f = rng.choice(goals + targets)
        followups.append(rng.choice([
            "How is it going? Remember that I need %s." % f["need"],
            "While you are at it, also look out for %s." % f["need"],
            "Keep going, and don't submit until you have everything I asked for."]))
    return {"roles": roles, "specs": specs, "goals": goals, "probes": probes,
            "followups": followups, "report": rng.randint(100, 999)}


def render(p, conv, words_per_tool, trace_id):
    g1, g2 = p["goals"]
    task = ("I need two facts from the shared archive: %s, and %s. Search the notes, documents "
            "and logs until you have both, then file them with submit_report." % (g1["need"],
                                                                                 g2["need"]))
    summary = "%s: %s; %s: %s" % (g1["need"], g1["value"], g2["need"], g2["value"])
    turns, specs, followups = [{"role": "user", "content": task}], iter(p["specs"]), iter(
        p["followups"])
    for role in p["roles"][1:-3]:
        if role == "assistant":
            spec = next(specs)
            turns.append({"role": "assistant", "content": call_text(spec)})
        elif role == "tool":
            w = max(MIN_WORDS, min(MAX_WORDS, int(words_per_tool * spec["jitter"])))
            turns.append({"role": "tool", "name": spec["tool"],
                          "content": render_tool(conv, spec, w)})
        else:
            turns.append({"role": "user", "content": next(followups)})
    turns += [{"role": "assistant", "content": "submit_report(summary=%s)" % json.dumps(summary)},
              {"role": "tool", "name": "submit_report",
               "content": "Report R-%d filed with 2 items." % p["report"]},
              {"role": "assistant", "content": "Done, the report is filed. %s %s" % (
                  g1["sentence"], g2["sentence"])}]
    return {"id": trace_id, "system": SYSTEM, "tools": TOOLS, "turns": turns,
            "probes": p["probes"]}


def check(trace):
    """Each answer occurs before its probe only in its evidence turns (verbatim there)."""
    for p in trace["probes"]:
        for i, t in enumerate(trace["turns"][:p["after_turn"] + 1]):
            inside = p["answer"].lower() in t["content"].lower()
            if inside != (i in p["evidence_turns"]) or (inside and p["answer"] not in t["content"]):
                raise AssertionError("%s: answer %r in turn %d" % (trace["id"], p["answer"], i))


def make_trace(seed, index, convs, args):
    rng = random.Random("%d:%d" % (seed, index))
    conv = rng.choice(convs)
    top = rng.randint(args.min_turns, args.max_turns)
    for n_turns in range(top, args.min_turns - 1, -1):
        p = plan(random.Random("%d:%d:%d" % (seed, index, n_turns)), conv, n_turns)
        trace_id = "s%d-%04d-%s" % (seed, index, conv["name"])
        n_tools = len(p["specs"])
        skeleton = render(p, conv, MIN_WORDS, trace_id)
        tool_chars = sum(len(t["content"]) for t in skeleton["turns"][1:-3] if t["role"] == "tool")
        spare = (args.max_tokens - estimate_tokens(skeleton)) * CHARS_PER_TOKEN + tool_chars
        wpt = spare / n_tools / 6.0    # about 6 characters per word in LoCoMo lines
        if wpt < MIN_WORDS and n_turns > args.min_turns:
            continue
        while True:
            trace = render(p, conv, wpt, trace_id)
            if estimate_tokens(trace) <= args.max_tokens:
                check(trace)
                return trace
            if wpt < MIN_WORDS / 1.25:
                break
            wpt *= 0.95
    sys.exit("%s: no trace of %d+ turns fits in %d tokens" % (trace_id, args.min_turns,
                                                             args.max_tokens))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--min-turns", type=int, default=10)
    ap.add_argument("--max-turns", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--locomo", default=LOCOMO)
    args = ap.parse_args(argv)
    if not 10 <= args.min_turns <= args.max_turns:
        ap.error("need 10 <= --min-turns <= --max-turns")
    convs = load_conversations(args.locomo)
    os.makedirs(args.out, exist_ok=True)
    for i in range(args.n):
        trace = make_trace(args.seed, i, convs, args)
        with open(os.path.join(args.out, trace["id"] + ".json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(trace, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
