#!/usr/bin/env python3
"""scripts/gen_textworld.py (docs/eval/segments.md): the same arguments give the same bytes and
another seed other worlds; world i and its first steps do not depend on --worlds or --steps; every
field has its type and place; segment counts stay in --segments after every step; updates delete
only existing names and add only new task records; every query's answer and `needs` chain are
re-derived by parsing the segments' TEXT after replaying the updates, without the generator's
state; rooms and furniture never change while objects and the robot do. Runs with unittest
(ctest) or pytest."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gen_textworld.py")

# The first sentence of each kind of segment; each text must match exactly one of these.
SENTENCES = {
    "room": re.compile(r"The (?P<x>.+?) is a room of the house\. (?:A door leads|Doors lead) "
                       r"from it to (?P<near>.+)\.$"),
    "door": re.compile(r"The door between the (?P<a>.+?) and the (?P<b>.+?) is "
                       r"(?P<state>open|closed|locked)\.$"),
    "furniture": re.compile(r"The (?P<x>.+?) stands in the (?P<y>.+?)\. [^.]+\.$"),
    "container": re.compile(r"The (?P<x>.+?) (?:is part of|sits on) the (?P<y>.+?)\. "
                            r"It (?P<lid>is open|is closed|has no lid)\.$"),
    "object": re.compile(r"The (?P<x>.+?) (?:is inside the (?P<inside>.+?)|is on the (?P<on>.+?)|"
                         r"is held by the robot)\. [^.]+\.$"),
    "agent": re.compile(r"The (?P<x>robot) is in the (?P<y>.+?)\. "
                        r"It is holding (?:the (?P<held>.+?)|nothing)\.$"),
    "task": re.compile(r"Task (?P<n>\d+): [^.]+\. Done\.$"),
}
QUERIES = {
    "room": re.compile(r"In which room is the (?P<x>.+)\?$"),
    "pickup": re.compile(r"Which room must the robot go to in order to pick up the (?P<x>.+)\?$"),
    "furniture": re.compile(r"Which piece of furniture holds the (?P<x>.+)'s container\?$"),
    "open": re.compile(r"Which container must the robot open to reach the (?P<x>.+)\?$"),
}


def run(*args):
    r = subprocess.run([sys.executable, SCRIPT, "--out", "-", *args], capture_output=True)
    if r.returncode != 0:
        raise AssertionError(r.stderr.decode())
    return r.stdout


def worlds(data):
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


class Memory:
    """A world's segments as read from their text alone."""

    def __init__(self, segments):
        self.text = {s["name"]: s["text"] for s in segments}

    def parse(self, test):
        """name -> (kind, match); checks each text matches its own kind's sentence only and that
        its subject is the name's id."""
        out = {}
        for name, text in self.text.items():
            kinds = [k for k, p in SENTENCES.items() if p.match(text)]
            test.assertEqual(kinds, [name.split(":")[0]], "%s: %r" % (name, text))
            m = SENTENCES[kinds[0]].match(text)
            if "x" in m.groupdict():
                test.assertEqual(name.split(":", 1)[1], m["x"].replace(" ", "-"), text)
            out[name] = (kinds[0], m)
        return out

    def check_and_index(self, test):
        """Display name -> segment name and each entity's parent, checking the world is
        consistent: one name per label, doors and room texts agree, the robot's hold matches."""
        parsed = self.parse(test)
        label = {}
        for name, (kind, m) in parsed.items():
            if "x" in m.groupdict():
                test.assertNotIn(m["x"], label, "two segments named %r" % m["x"])
                label[m["x"]] = name
        parent, held = {}, []
        for name, (kind, m) in parsed.items():
            if kind in ("furniture", "container", "agent"):
                parent[name] = label[m["y"]]
            elif kind == "object":
                target = m["inside"] or m["on"]
                parent[name] = label[target] if target else "agent:robot"
                if not target:
                    held.append(m["x"])
                want = "container" if m["inside"] else "furniture" if m["on"] else "agent"
                test.assertEqual(parent[name].split(":")[0], want, self.text[name])
        for name, p in parent.items():
            want = {"furniture": "room", "container": "furniture", "agent": "room"}
            if name.split(":")[0] in want:
                test.assertEqual(p.split(":")[0], want[name.split(":")[0]], self.text[name])
        robot = parsed["agent:robot"][1]
        test.assertEqual(held, [robot["held"]] if robot["held"] else [])
        # Each room's text lists exactly the rooms its doors lead to.
        near = {n: set() for n, (k, _) in parsed.items() if k == "room"}
        for name, (kind, m) in parsed.items():
            if kind == "door":
                a, b = label[m["a"]], label[m["b"]]
                near[a].add("the " + m["b"])
                near[b].add("the " + m["a"])
        for name, s in near.items():
            listed = re.split(r", | and ", parsed[name][1]["near"])
            test.assertEqual(sorted(listed), sorted(s), self.text[name])
        return label, parent, parsed

    def chain(self, parent, name):
        out = [name]
        while not out[-1].startswith("room:"):
            out.append(parent[out[-1]])
            if len(out) > 5:
                raise AssertionError("no room at the end of %s" % out)
        return out


class GenTextworld(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.default = run()
        cls.runs = {"default": worlds(cls.default),
                    "small": worlds(run("--seed", "3", "--worlds", "6", "--segments", "30:33",
                                        "--steps", "40")),
                    "large": worlds(run("--seed", "5", "--worlds", "3", "--segments", "190:200",
                                        "--steps", "30"))}

    def all_worlds(self):
        for key, ws in self.runs.items():
            for w in ws:
                yield key, w

    def test_same_arguments_same_bytes_other_seed_other_worlds(self):
        self.assertEqual(run(), self.default)
        self.assertEqual(run("--seed", "0", "--worlds", "4", "--segments", "40:200", "--steps",
                             "20"), self.default)
        other = run("--seed", "1")
        self.assertFalse(set(other.splitlines()) & set(self.default.splitlines()))
        # World i depends on (seed, i) alone, and fewer steps are a prefix of more.
        lines = self.default.splitlines()
        self.assertEqual(run("--worlds", "2").splitlines(), lines[:2])
        short = worlds(run("--steps", "7"))
        for a, b in zip(short, worlds(self.default)):
            self.assertEqual(a["segments"], b["segments"])
            self.assertEqual(a["steps"], b["steps"][:7])

    def test_file_output_equals_stdout(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.jsonl")
            subprocess.run([sys.executable, SCRIPT, "--out", path], check=True)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), self.default)

    def test_schema(self):
        self.assertEqual(len(self.runs["default"]), 4)
        for key, w in self.all_worlds():
            self.assertEqual(list(w), ["id", "system", "segments", "steps"])
            self.assertRegex(w["id"], r"^world-\d+-\d+$")
            self.assertTrue(w["system"].endswith(".") and w["system"].count(". ") == 0)
            for s in w["segments"]:
                self.assertEqual(list(s), ["name", "text"])
            self.assertEqual(len(w["steps"]), {"default": 20, "small": 40, "large": 30}[key])
            for st in w["steps"]:
                self.assertEqual(list(st), ["updates", "query", "answer", "needs"])
                self.assertTrue(1 <= len(st["updates"]) <= 4)
                for u in st["updates"]:
                    self.assertIn(list(u), (["name", "text"], ["name", "delete"]))
                    self.assertIs(u.get("delete", True), True)
                    self.assertTrue(isinstance(u.get("text", ""), str))
                self.assertEqual(len({u["name"] for u in st["updates"]}), len(st["updates"]))
                self.assertTrue(st["query"].endswith("?"))
                self.assertRegex(st["answer"], r"^the [a-z][a-z -]*[a-z]$")
                self.assertTrue(all(isinstance(n, str) for n in st["needs"]))

    def test_counts_names_updates_and_answers_from_the_text(self):
        ranges = {"default": (40, 200), "small": (30, 33), "large": (190, 200)}
        kinds_seen = set()
        for key, w in self.all_worlds():
            lo, hi = ranges[key]
            names = [s["name"] for s in w["segments"]]
            self.assertEqual(len(names), len(set(names)))
            kinds = [n.split(":")[0] for n in names]
            # The natural order: rooms, doors, furniture, containers, objects, robot, tasks.
            order = ["room", "door", "furniture", "container", "object", "agent", "task"]
            self.assertEqual(kinds, sorted(kinds, key=order.index))
            self.assertTrue(4 <= kinds.count("room") <= 10)
            self.assertEqual(kinds.count("agent"), 1)
            mem = Memory(w["segments"])
            self.assertTrue(lo <= len(mem.text) <= hi, (w["id"], len(mem.text)))
            mem.check_and_index(self)
            last_task = max(int(n[5:]) for n in names if n.startswith("task:"))
            robot_was = mem.check_and_index(self)[1]["agent:robot"]
            for i, st in enumerate(w["steps"]):
                where = "%s step %d" % (w["id"], i)
                for u in st["updates"]:
                    if u.get("delete"):
                        self.assertIn(u["name"], mem.text, where)
                        self.assertTrue(u["name"].startswith("object:"), where)
                        del mem.text[u["name"]]
                    elif u["name"] in mem.text:
                        self.assertNotEqual(mem.text[u["name"]], u["text"], where)
                        mem.text[u["name"]] = u["text"]
                    else:   # an addition: only new task records, numbered on
                        self.assertRegex(u["name"], r"^task:\d+$", where)
                        self.assertGreater(int(u["name"][5:]), last_task, where)
                        last_task = int(u["name"][5:])
                        mem.text[u["name"]] = u["text"]
                self.assertTrue(lo <= len(mem.text) <= hi, where)
                label, parent, parsed = mem.check_and_index(self)
                self.check_robot_walked(robot_was, parent, parsed, where)
                robot_was = parent["agent:robot"]
                for n in st["needs"]:
                    self.assertIn(n, mem.text, where)
                self.assertGreaterEqual(len(st["needs"]), 2, where)
                kinds_seen.add(self.check_answer(st, label, parent, parsed, mem, where))
        self.assertEqual(kinds_seen, {"room/object", "room/container", "pickup", "furniture",
                                      "open"})

    def check_robot_walked(self, was, parent, parsed, where):
        """The robot, in one step of at most two actions, walks through at most two doors, none
        of them locked now (it opens closed ones; someone may close one behind it)."""
        label = {"the " + m["x"]: n for n, (k, m) in parsed.items() if "x" in m.groupdict()}
        near = {}
        for kind, m in parsed.values():
            if kind == "door" and m["state"] != "locked":
                a, b = label["the " + m["a"]], label["the " + m["b"]]
                near.setdefault(a, set()).add(b)
                near.setdefault(b, set()).add(a)
        reach = {was} | near.get(was, set())
        reach |= {r for n in list(reach) for r in near.get(n, set())}
        self.assertIn(parent["agent:robot"], reach, where)

    def check_answer(self, st, label, parent, parsed, mem, where):
        """Re-derives the step's answer and chain from the parsed text; returns the query kind."""
        kind = [k for k, p in QUERIES.items() if p.match(st["query"])]
        self.assertEqual(len(kind), 1, st["query"])
        kind = kind[0]
        subject = label[QUERIES[kind].match(st["query"])["x"]]
        chain = mem.chain(parent, subject)
        hop = dict((v, k) for k, v in label.items())
        if kind in ("room", "pickup"):
            self.assertEqual(st["needs"], chain, where)
            self.assertEqual(st["answer"], "the " + hop[chain[-1]], where)
            if kind == "pickup":
                self.assertNotEqual(chain[1], "agent:robot", where)
            return kind if kind == "pickup" else "room/" + subject.split(":")[0]
        self.assertTrue(subject.startswith("object:") and chain[1].startswith("container:"), where)
        self.assertEqual(st["needs"], chain[:2], where)
        if kind == "furniture":
            self.assertEqual(st["answer"], "the " + hop[chain[2]], where)
        else:
            self.assertEqual(parsed[chain[1]][1]["lid"], "is closed", where)
            self.assertEqual(st["answer"], "the " + hop[chain[1]], where)
        return kind

    def test_mostly_long_chains(self):
        lengths = [len(st["needs"]) for _, w in self.all_worlds() for st in w["steps"]]
        self.assertGreaterEqual(sum(n >= 3 for n in lengths) / len(lengths), 0.6)
        self.assertIn(4, lengths)

    def test_segment_texts_are_short_sentences(self):
        for _, w in self.all_worlds():
            texts = [s["text"] for s in w["segments"]]
            texts += [u["text"] for st in w["steps"] for u in st["updates"] if "text" in u]
            for t in texts:
                self.assertTrue(6 <= len(t.split()) <= 30, t)

    def test_static_and_dynamic_segments(self):
        changed, total, robot_moves = 0, 0, 0
        for _, w in self.all_worlds():
            updated = {u["name"] for st in w["steps"] for u in st["updates"]}
            for n in updated:
                # Rooms and furniture never change; task records are only ever added.
                self.assertFalse(n.startswith(("room:", "furniture:")), n)
            initial = {s["name"] for s in w["segments"]}
            self.assertFalse({n for n in updated if n.startswith("task:")} & initial)
            changed += len(updated & initial)
            total += len(initial)
            robot_moves += "agent:robot" in updated
            self.assertTrue(any(n.startswith("object:") for n in updated), w["id"])
        self.assertEqual(robot_moves, sum(len(ws) for ws in self.runs.values()))
        self.assertTrue(0.05 <= changed / total <= 0.5, changed / total)

    def test_bad_ranges_are_refused(self):
        for bad in ("10:20", "50:40", "40", "40:x", "40:5000"):
            r = subprocess.run([sys.executable, SCRIPT, "--segments", bad, "--out", "-"],
                               capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertIn("--segments", r.stderr)


if __name__ == "__main__":
    unittest.main()
