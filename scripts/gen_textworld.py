#!/usr/bin/env python3
"""Generates synthetic household "text worlds" for `kvmem eval segments` (docs/eval/segments.md).

    scripts/gen_textworld.py [--seed 0] [--worlds 4] [--segments 40:200] [--steps 20] [--out FILE|-]

A world is a planning robot's memory as named text segments (rooms, doors, furniture, containers,
small objects, the robot, past task records), the workload of the KEEP paper (sections 1, 4.1-4.2).
Each step changes 1-4 segments (the robot moves, picks up, puts down; someone in the household
moves an object, opens a drawer, locks a door, eats an apple; a task record is added), then asks a
question whose answer needs a chain of segments, e.g. key -> drawer -> desk -> study.

Writes JSON lines, one world each. Deterministic: world i depends only on (--seed, i), so the
same arguments give the same bytes. Standard library only.
"""
import argparse
import copy
import json
import random
import sys

SYSTEM = ("You are the planner of a household robot: answer each question about the world state "
          "described below in a few words.")

ROOMS = ["study", "kitchen", "hall", "bedroom", "garage", "bathroom", "pantry", "attic", "cellar",
         "laundry", "office", "nursery", "library", "workshop", "living room", "dining room"]
FURNITURE = ["desk", "shelf", "table", "wardrobe", "bench", "dresser", "cupboard", "sideboard",
             "bookcase", "counter", "nightstand", "workbench", "cabinet", "sofa", "stool",
             "trolley", "rack", "bed", "armchair", "locker"]
FURNITURE_ADJ = ["oak", "pine", "white", "black", "low", "tall", "old", "long", "narrow", "metal",
                 "glass", "walnut", "painted", "corner", "folding", "grey", "cherry", "iron"]
FURNITURE_DESC = ["It is made of wood.", "It has been there for years.", "It is rather heavy.",
                  "It was bought with the house.", "It is wiped clean every week.",
                  "It has not been moved in years."]
# noun -> (openable, movable). Fixed containers belong to their furniture ("is part of");
# movable ones stand on it ("sits on") and can be carried to other furniture, objects and all.
CONTAINERS = {"drawer": (True, False), "compartment": (True, False), "box": (True, True),
              "tin": (True, True), "jar": (True, True), "case": (True, True),
              "basket": (False, True), "tray": (False, True), "bowl": (False, True),
              "crate": (False, True), "caddy": (False, True)}
CONTAINER_ADJ = ["red", "blue", "green", "wooden", "plastic", "wicker", "top", "bottom", "left",
                 "right", "square", "round", "deep", "shallow", "striped", "painted", "steel",
                 "cardboard", "lacquered", "dusty", "spare", "big", "little", "middle"]
OBJECTS = ["key", "book", "mug", "coin", "pen", "phone", "remote", "cup", "apple", "spoon", "fork",
           "candle", "battery", "sock", "glove", "scarf", "hat", "watch", "ring", "letter",
           "notebook", "stapler", "comb", "brush", "towel", "soap", "bottle", "plate", "torch",
           "charger", "wallet", "card", "marble", "ball", "pencil", "ruler", "tape", "map",
           "ticket", "photo", "banana", "biscuit", "lemon", "whistle", "badge", "button",
           "needle", "thimble", "envelope", "puzzle"]
OBJECT_ADJ = ["red", "blue", "green", "yellow", "black", "white", "small", "large", "old", "new",
              "silver", "brass", "striped", "spotted", "heavy", "tiny", "purple", "pink", "golden",
              "plain", "shiny", "worn", "spare", "grey"]
OBJECT_DESC = ["It belongs to the family.", "It is used almost every day.", "It was a gift.",
               "It is easy to carry.", "It is fragile.", "It belongs to the children.",
               "It was bought last week.", "It is one of a kind."]
MAX_SEGMENTS = 600   # the name pools above run out beyond this


class World:
    """The ground truth of one world. Entities are keyed by segment name; `order` is the memory's
    segment order (initial order, deleted names removed, new names appended)."""

    def __init__(self):
        self.label = {}       # segment name -> display name ("red key")
        self.rooms = []       # [room name]
        self.links = {}       # room name -> [neighbouring room names], in door order
        self.doors = {}       # door name -> [room a, room b, state: open|closed|locked]
        self.furniture = {}   # name -> [room, description]
        self.containers = {}  # name -> [furniture, is_open (None: no lid), movable]
        self.objects = {}     # name -> [("in", container) | ("on", furniture) | ("held",), desc]
        self.robot = ["", None]   # [room, held object or None]
        self.tasks = {}       # name -> text
        self.next_task = 1
        self.order = []

    def the(self, name):
        return "the " + self.label[name]

    def text(self, name):
        kind = name.split(":")[0]
        if kind == "room":
            near = [self.the(r) for r in self.links[name]]
            lead = ("A door leads from it to %s." % near[0] if len(near) == 1 else
                    "Doors lead from it to %s and %s." % (", ".join(near[:-1]), near[-1]))
            return "The %s is a room of the house. %s" % (self.label[name], lead)
        if kind == "door":
            a, b, state = self.doors[name]
            return "The door between %s and %s is %s." % (self.the(a), self.the(b), state)
        if kind == "furniture":
            room, desc = self.furniture[name]
            return "The %s stands in %s. %s" % (self.label[name], self.the(room), desc)
        if kind == "container":
            furn, is_open, movable = self.containers[name]
            where = "sits on" if movable else "is part of"
            state = ("It has no lid." if is_open is None else
                     "It is open." if is_open else "It is closed.")
            return "The %s %s %s. %s" % (self.label[name], where, self.the(furn), state)
        if kind == "object":
            where, desc = self.objects[name]
            if where[0] == "held":
                return "The %s is held by the robot. %s" % (self.label[name], desc)
            rel = "is inside" if where[0] == "in" else "is on"
            return "The %s %s %s. %s" % (self.label[name], rel, self.the(where[1]), desc)
        if kind == "agent":
            room, held = self.robot
            holding = self.the(held) if held else "nothing"
            return "The robot is in %s. It is holding %s." % (self.the(room), holding)
        return self.tasks[name]

    def snapshot(self):
        return {name: self.text(name) for name in self.order}

    def chain(self, name):
        """Segment names from `name` to its room: object -> container -> furniture -> room, or
        object -> robot -> room."""
        out = [name]
        while not name.startswith("room:"):
            if name.startswith("object:"):
                where = self.objects[name][0]
                name = "agent:robot" if where[0] == "held" else where[1]
            elif name.startswith("container:"):
                name = self.containers[name][0]
            elif name.startswith("furniture:"):
                name = self.furniture[name][0]
            else:
                name = self.robot[0]
            out.append(name)
        return out


def slug(label):
    return label.replace(" ", "-")


def pick_labels(rng, nouns, adjectives, k, used):
    """k display names, unique in `used`: bare nouns first, then adjective + noun."""
    bare = [n for n in nouns if n not in used]
    rng.shuffle(bare)
    out = bare[:k]
    combos = [a + " " + n for a in adjectives for n in nouns if a + " " + n not in used]
    rng.shuffle(combos)
    out += combos[:k - len(out)]
    if len(out) < k:
        raise ValueError("name pool exhausted")
    used.update(out)
    return out


def build_world(rng, n):
    """A world of exactly n segments, in the natural order rooms, doors, furniture, containers,
    objects, agent, tasks; shuffled inside each kind, so a chain crosses the memory."""
    w = World()
    n_rooms = rng.randint(4, max(4, min(10, 4 + (n - 40) // 20)))   # 10 rooms from 160 on
    rooms = rng.sample(ROOMS, n_rooms)
    w.rooms = ["room:" + slug(r) for r in rooms]
    for r, name in zip(rooms, w.rooms):
        w.label[name] = r
        w.links[name] = []
    # A spanning tree keeps every room reachable; a few extra doors make loops.
    pairs = [(w.rooms[rng.randrange(i)], w.rooms[i]) for i in range(1, n_rooms)]
    others = [(a, b) for i, a in enumerate(w.rooms) for b in w.rooms[i + 1:]
              if (a, b) not in pairs and (b, a) not in pairs]
    pairs += rng.sample(others, min(len(others), rng.randint(0, n_rooms // 3)))
    for a, b in pairs:
        name = "door:%s-%s" % (a[5:], b[5:])
        w.doors[name] = [a, b, rng.choice(["open", "open", "closed", "closed", "locked"])]
        w.links[a].append(b)
        w.links[b].append(a)
    rest = n - n_rooms - len(pairs) - 1
    n_tasks = max(1, rest // 10)
    n_furn = max(n_rooms, rest * 2 // 10)
    n_cont = max(1, rest * 3 // 10)
    n_obj = rest - n_tasks - n_furn - n_cont
    if n_obj < 3:
        raise ValueError("%d segments are too few for a world" % n)
    used = set(ROOMS)
    for i, label in enumerate(pick_labels(rng, FURNITURE, FURNITURE_ADJ, n_furn, used)):
        room = w.rooms[i] if i < n_rooms else rng.choice(w.rooms)   # every room has furniture
        name = "furniture:" + slug(label)
        w.label[name] = label
        w.furniture[name] = [room, rng.choice(FURNITURE_DESC)]
    furn = sorted(w.furniture)
    for label in pick_labels(rng, list(CONTAINERS), CONTAINER_ADJ, n_cont, used):
        openable, movable = CONTAINERS[label.split(" ")[-1]]
        name = "container:" + slug(label)
        w.label[name] = label
        w.containers[name] = [rng.choice(furn), rng.random() < 0.5 if openable else None, movable]
    conts = sorted(w.containers)
    for label in pick_labels(rng, OBJECTS, OBJECT_ADJ, n_obj, used):
        name = "object:" + slug(label)
        w.label[name] = label
        where = ("in", rng.choice(conts)) if rng.random() < 0.6 else ("on", rng.choice(furn))
        w.objects[name] = [where, rng.choice(OBJECT_DESC)]
    w.label["agent:robot"] = "robot"
    w.robot = [rng.choice(w.rooms), None]
    for _ in range(n_tasks):
        add_task(w, rng, past_task(w, rng))
    groups = [list(w.rooms), list(w.doors), furn, conts, sorted(w.objects)]
    for g in groups[2:]:
        rng.shuffle(g)
    w.order = [name for g in groups for name in g] + ["agent:robot"] + sorted(
        w.tasks, key=lambda t: int(t[5:]))
    assert len(w.order) == n
    return w


def past_task(w, rng):
    obj, room = w.the(rng.choice(sorted(w.objects))), w.the(rng.choice(w.rooms))
    door = w.doors[rng.choice(sorted(w.doors))]
    return rng.choice([
        "bring %s to %s" % (obj, room),
        "put %s on %s" % (obj, w.the(rng.choice(sorted(w.furniture)))),
        "close the door between %s and %s" % (w.the(door[0]), w.the(door[1])),
        "tidy %s" % room,
        "find %s and hand it over" % obj])


def add_task(w, rng, what):
    name = "task:%d" % w.next_task
    w.tasks[name] = "Task %d: %s. Done." % (w.next_task, what)
    w.label[name] = "task %d" % w.next_task
    w.next_task += 1
    return name


def room_of(w, name):
    return w.chain(name)[-1]


# Actions. Each changes the world or returns False; take_step() keeps the step's diff in 1..4.

def robot_move(w, rng, lo, hi):
    room = w.robot[0]
    doors = [d for d in sorted(w.doors) if room in w.doors[d][:2] and w.doors[d][2] != "locked"]
    if not doors:
        return False
    door = w.doors[rng.choice(doors)]
    door[2] = "open"   # the robot opens a closed door to pass
    w.robot[0] = door[1] if door[0] == room else door[0]
    return True


def robot_pick(w, rng, lo, hi):
    if w.robot[1]:
        return False
    here = [o for o in sorted(w.objects) if w.objects[o][0][0] != "held"
            and room_of(w, o) == w.robot[0]]
    if not here:
        return robot_move(w, rng, lo, hi)
    obj = rng.choice(here)
    where = w.objects[obj][0]
    if where[0] == "in" and w.containers[where[1]][1] is False:
        w.containers[where[1]][1] = True   # opens it to take the object out
    w.objects[obj][0] = ("held",)
    w.robot[1] = obj
    return True


def robot_put(w, rng, lo, hi):
    obj = w.robot[1]
    if not obj:
        return False
    room = w.robot[0]
    targets = [f for f in sorted(w.furniture) if w.furniture[f][0] == room]
    targets += [c for c in sorted(w.containers) if room_of(w, c) == room]
    target = rng.choice(targets)
    if target.startswith("container:"):
        if w.containers[target][1] is False:
            w.containers[target][1] = True
        w.objects[obj][0] = ("in", target)
    else:
        w.objects[obj][0] = ("on", target)
    w.robot[1] = None
    if len(w.order) < hi and rng.random() < 0.4:
        rel = "into" if target.startswith("container:") else "on"
        name = add_task(w, rng, "put %s %s %s in %s" % (w.the(obj), rel, w.the(target),
                                                        w.the(room)))
        w.order.append(name)
    return True


def household_move(w, rng, lo, hi):
    free = [o for o in sorted(w.objects) if w.objects[o][0][0] != "held"]
    if not free:
        return False
    obj = rng.choice(free)
    old = w.objects[obj][0]
    conts = [c for c in sorted(w.containers) if c != old[1]]
    if conts and rng.random() < 0.6:
        w.objects[obj][0] = ("in", rng.choice(conts))
    else:
        target = rng.choice([f for f in sorted(w.furniture) if f != old[1]])
        w.objects[obj][0] = ("on", target)
    return True


def toggle_container(w, rng, lo, hi):
    lids = [c for c in sorted(w.containers) if w.containers[c][1] is not None]
    if not lids:
        return False
    c = rng.choice(lids)
    w.containers[c][1] = not w.containers[c][1]
    return True


def toggle_door(w, rng, lo, hi):
    door = w.doors[rng.choice(sorted(w.doors))]
    door[2] = rng.choice({"open": ["closed"], "closed": ["open", "locked"],
                          "locked": ["closed"]}[door[2]])
    return True


def consume(w, rng, lo, hi):
    free = [o for o in sorted(w.objects) if w.objects[o][0][0] != "held"]
    if len(w.order) <= lo or len(free) <= 3:
        return False
    obj = rng.choice(free)
    del w.objects[obj]
    w.order.remove(obj)
    return True


def move_container(w, rng, lo, hi):
    movable = [c for c in sorted(w.containers) if w.containers[c][2]]
    if not movable or len(w.furniture) < 2:
        return False
    c = rng.choice(movable)
    w.containers[c][0] = rng.choice([f for f in sorted(w.furniture) if f != w.containers[c][0]])
    return True


# Robot actions most of the time; household events make objects move without the robot.
ACTIONS = [(robot_move, 20), (robot_pick, 20), (robot_put, 22), (household_move, 16),
           (toggle_container, 10), (toggle_door, 5), (consume, 4), (move_container, 3)]


def diff(before, w):
    """Updates that turn the `before` snapshot into w's segments, in memory order: changed and
    deleted names where they were, then new names."""
    after = w.snapshot()
    updates = []
    for name, text in before.items():
        if name not in after:
            updates.append({"name": name, "delete": True})
        elif after[name] != text:
            updates.append({"name": name, "text": after[name]})
    updates += [{"name": n, "text": t} for n, t in after.items() if n not in before]
    return updates


def take_step(w, rng, lo, hi):
    """Applies 1-2 actions whose combined diff is 1-4 updates (drawn again until it is); returns
    (world, updates)."""
    before = w.snapshot()
    actions, weights = zip(*ACTIONS)
    while True:
        trial = copy.deepcopy(w)
        for _ in range(1 if rng.random() < 0.5 else 2):
            rng.choices(actions, weights)[0](trial, rng, lo, hi)
        updates = diff(before, trial)
        if 1 <= len(updates) <= 4:
            return trial, updates


# Query kinds: (kind, weight). The kind is drawn first, then a subject it fits, so the rarer
# chains (an object in a closed container) are asked about as often as intended.
QUERY_KINDS = [("room", 35), ("container_room", 10), ("pickup", 20), ("furniture", 15),
               ("open", 20)]


def ask(w, rng, updates):
    """A multi-hop question about the world after the step: (query, answer, needs). Half the time
    the subject is one whose own segment just changed, where there is one."""
    objs = sorted(w.objects)
    inside = [o for o in objs if w.objects[o][0][0] == "in"]
    pools = {"room": objs, "container_room": sorted(w.containers),
             "pickup": [o for o in objs if w.objects[o][0][0] != "held"], "furniture": inside,
             "open": [o for o in inside if w.containers[w.objects[o][0][1]][1] is False]}
    kinds = [(k, p) for k, p in QUERY_KINDS if pools[k]]
    kind = rng.choices([k for k, _ in kinds], [p for _, p in kinds])[0]
    touched = {u["name"] for u in updates if "text" in u}
    recent = [s for s in pools[kind] if s in touched]
    subject = rng.choice(recent if recent and rng.random() < 0.5 else pools[kind])
    chain, it = w.chain(subject), w.the(subject)
    if kind in ("room", "container_room"):
        return "In which room is %s?" % it, w.the(chain[-1]), chain
    if kind == "pickup":
        return ("Which room must the robot go to in order to pick up %s?" % it,
                w.the(chain[-1]), chain)
    if kind == "furniture":
        return "Which piece of furniture holds %s's container?" % it, w.the(chain[2]), chain[:2]
    return "Which container must the robot open to reach %s?" % it, w.the(chain[1]), chain[:2]


def generate(seed, i, lo, hi, steps):
    rng = random.Random("textworld-%d-%d" % (seed, i))
    w = build_world(rng, rng.randint(lo, hi))
    world = {"id": "world-%d-%d" % (seed, i), "system": SYSTEM,
             "segments": [{"name": n, "text": t} for n, t in w.snapshot().items()], "steps": []}
    for _ in range(steps):
        w, updates = take_step(w, rng, lo, hi)
        query, answer, needs = ask(w, rng, updates)
        world["steps"].append({"updates": updates, "query": query, "answer": answer,
                               "needs": needs})
    return world


def parse_range(s):
    try:
        lo, hi = (int(x) for x in s.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError("expected MIN:MAX, got %r" % s)
    if not 30 <= lo <= hi <= MAX_SEGMENTS:
        raise argparse.ArgumentTypeError("need 30 <= MIN <= MAX <= %d" % MAX_SEGMENTS)
    return lo, hi


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worlds", type=int, default=4)
    ap.add_argument("--segments", type=parse_range, default=(40, 200), metavar="MIN:MAX")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="-", help="JSONL file, - for stdout")
    args = ap.parse_args()
    if args.worlds < 0 or args.steps < 0:
        ap.error("--worlds and --steps must not be negative")
    lines = [json.dumps(generate(args.seed, i, *args.segments, args.steps), ensure_ascii=False)
             for i in range(args.worlds)]
    data = "".join(line + "\n" for line in lines)
    if args.out == "-":
        sys.stdout.write(data)
    else:
        with open(args.out, "w", encoding="utf-8", newline="\n") as f:
            f.write(data)


if __name__ == "__main__":
    main()
