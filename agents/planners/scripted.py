"""The `scripted` planner: the embedded, offline, deterministic stand-in for an LLM.

It sees exactly what an LLM would — the system prompt, the task message,
tool results, cell output and the images it asked for — and writes real tool
calls (tool calling) or real Python cells (code).  It never reads simulator
state: object positions come from `locate` results it parsed out of the
conversation (tool calling) or are computed by the cell it wrote (code).
It handles pick-and-place instructions ("pick up the X ... and place it on
the Y", "put the X in the Y") and placing beside another object ("put the X to
the right of the Y", "... in front of / behind / next to the Y": on the table,
a small gap from the Y on that side, see beside_spot); for anything else it
tries the VLA once (when the interface has one) and then gives up honestly.  Composite instructions
("put both the X and the Y in the Z", "A and B", "put the X in the Y and close
it") are split into sub-goals done in order; a sub-goal is checked from a
fresh `locate`, because the benchmark's check only turns true once every goal
holds.  Sub-goals that are not pick-and-place (open, close, turn on/off) go to
the VLA; where it cannot do them the episode ends honestly.

Token usage is *estimated* from the exact serialized prompt with a real BPE
tokenizer, the image-token formula and a prefix-cache model
(`agents.usage.UsageEstimator`); every call is marked `usage_source='estimated'`.
"""
from __future__ import annotations

import inspect
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from agents.planners.base import PlannerReply, ToolCall

MAX_VLA_TRIES = 2
MAX_PICK_TRIES = 2
QUALIFIERS = ("between", "next to", "on top of", "on", "in", "from", "at", "near", "closest to", "left of", "right of")
VERBS = r"(?:pick up|pick|grab|take|lift|put|place|move|set|get)"


@dataclass
class TaskPlan:
    instruction: str
    objects: list[str]
    verb_ok: bool = False
    obj_phrase: str = ""
    qualifier: str = ""
    ref_phrases: list[str] = field(default_factory=list)
    relation: str = "on"
    target_phrase: str = ""
    candidates: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    target: str | None = None
    """The first of `targets`: the target unless a spatial word picks another at run time."""
    targets: list[str] = field(default_factory=list)
    """Objects the target phrase names equally well (the two plates of 'the right plate')."""
    side: str | None = None
    """Spatial word that picks the object among same-named candidates ('the black bowl on the left')."""
    target_side: str | None = None
    """Spatial word that picks the target among `targets` ('the right plate')."""
    beside: str | None = None
    """With relation 'beside': which side of the target (the reference) to set the object down on:
    'left', 'right', 'front', 'back', or 'next' (the side the object is already on)."""

    @property
    def understood(self) -> bool:
        return bool(self.verb_ok and self.candidates and self.target)


def _words(text: str) -> set[str]:
    stop = {"the", "a", "an", "of", "and", "it", "to"}
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if w and w not in stop and not w.isdigit()}


#: What some LIBERO objects look like, in the words people use for them: world knowledge an LLM brings
#: from the scene images and everyday language (the asset names are not what an instruction says).
#: "white mug" is the plain porcelain one, not the yellow-and-white one.
LOOKS_LIKE = {
    "porcelain_mug": "white mug",
    "white_yellow_mug": "yellow and white mug",
    "red_coffee_mug": "red mug",
    "akita_black_bowl": "black bowl",
    "chefmate_8_frypan": "frying pan",
}

#: Spatial words that tell same-named objects apart ("the right plate", "the bowl at the front").
SIDE_WORDS = {"left": "left", "right": "right", "front": "front", "back": "back", "rear": "back",
              "middle": "middle", "center": "middle", "centre": "middle"}


def _descriptions(obj: str) -> list[set[str]]:
    """The word sets an object answers to: its name's words and, where known, what it looks like."""
    kind = re.sub(r"_\d+$", "", obj)
    out = [_words(kind.replace("_", " "))]
    if kind in LOOKS_LIKE:
        out.append(_words(LOOKS_LIKE[kind]))
    return out


def match_score(phrase: str, obj: str) -> tuple[int, int]:
    """(words shared with the phrase, minus description words the phrase lacks), best description.

    The penalty separates "white mug" (porcelain_mug: 'white mug', nothing extra) from the
    yellow-and-white mug (shares 'white mug' too, but says 'yellow').
    """
    want = _words(phrase)
    return max((len(want & d), -len(d - want)) for d in _descriptions(obj))


def ground(phrase: str, objects: list[str]) -> list[str]:
    """Scene objects that best match the phrase (all ties): most shared words, then fewest unsaid ones."""
    scored = [(match_score(phrase, o), o) for o in objects]
    scored = [(s, o) for s, o in scored if s[0] > 0]
    best = max((s for s, _ in scored), default=None)
    return [o for s, o in scored if s == best]


def side_word(phrase: str) -> str | None:
    """The spatial word of a phrase ('right plate' -> 'right', 'the middle' -> 'middle'), if any."""
    for w in re.split(r"[^a-z]+", phrase.lower()):
        if w in SIDE_WORDS:
            return SIDE_WORDS[w]
    return None


# The side convention.  LIBERO names sides as seen from across the table, facing the robot (as its
# agentview camera sees the scene): with the robot at -x facing +x, left = -y, right = +y,
# front = +x (away from the robot), back = -x.  Read from the benchmark's own BDDL files (the
# LIBERO-PRO package's libero/libero/bddl_files/libero_90): LIVING_ROOM_SCENE5 "put the red mug on
# the right plate" wants the mug on plate_2, which starts in plate_right_region (table y in
# [0.275, 0.325]) while plate_1 starts in plate_left_region (y in [-0.325, -0.275]);
# KITCHEN_SCENE2's bowl "at the front" starts at x in [0.075, 0.125] and the one "at the back" at
# x in [-0.175, -0.125]; KITCHEN_SCENE8's right moka pot (y ~ +0.25) and LIVING_ROOM_SCENE4's /
# STUDY_SCENE4's bowl / book "on the left" (y ~ -0.15 / -0.25) agree.  A real `locate` checks the
# world frame matches the tables' frame: libero_90/66 seed 0 puts plate_1 at y = -0.28, plate_2 at
# y = +0.31; libero_90/60 puts its left bowl at y = -0.13, the other at y = +0.05.
# "middle" is the one nearest the group's centre.  The code cells carry this function's own source.
def choose_by_side(positions, side):
    """Which of several same-named objects a side word means: left -y, right +y, front +x, back -x, middle central."""
    names = list(positions)
    if side == "left":
        return min(names, key=lambda n: positions[n][1])
    if side == "right":
        return max(names, key=lambda n: positions[n][1])
    if side == "front":
        return max(names, key=lambda n: positions[n][0])
    if side == "back":
        return min(names, key=lambda n: positions[n][0])
    cx = sum(positions[n][0] for n in names) / len(names)
    cy = sum(positions[n][1] for n in names) / len(names)
    return min(names, key=lambda n: (positions[n][0] - cx) ** 2 + (positions[n][1] - cy) ** 2)


#: "put the X to the right of the Y", "pick up the X and place it behind the Y", "put the X next to the Y":
#: set the X down on the table beside the Y.  Not "to the right compartment of the caddy" (a part of it),
#: nor "pick up the X next to the Y and place it on the Z" (which X), nor "pick up the X next to the Y".
_BESIDE = re.compile(
    rf"^(?:{VERBS}\s+(?:up\s+)?(?:the\s+)?(?P<obj>.+?)\s+and\s+(?:place|put|set|drop|move)\s+it"
    r"|(?:put|place|set|move)\s+(?:the\s+)?(?P<obj2>.+?))\s+"
    r"(?:(?:to|on)\s+the\s+(?P<side>left|right|front|back)\s+(?:side\s+)?of|(?P<front>in\s+front\s+of)"
    r"|(?P<behind>behind)|(?P<next>next\s+to|beside))\s+(?:the\s+)?"
    r"(?P<ref>(?!.*\band\s+(?:place|put|set|drop|move)\s+(?:it|them)\b).+)$")


def parse_task(instruction: str, objects: list[str]) -> TaskPlan:
    """Split a pick-and-place instruction into object, qualifier, relation and target."""
    plan = TaskPlan(instruction, objects)
    text = instruction.lower().strip().rstrip(".")
    beside = _BESIDE.match(text)
    if beside:  # "put the white bowl to the right of the plate": on the table, beside the plate
        left, plan.relation, plan.target_phrase = beside["obj"] or beside["obj2"], "beside", beside["ref"]
        plan.beside = ("front" if beside["front"] else "back" if beside["behind"] else "next" if beside["next"]
                       else beside["side"])
    else:
        m = re.match(rf"^{VERBS}\s+(?:up\s+)?(?:the\s+)?(.+?)\s+and\s+(?:place|put|set|drop|move)\s+it\s+(on top of|on|onto|in|into|inside|to)\s+(?:the\s+)?(.+)$", text)
        if not m:
            m = re.match(rf"^{VERBS}\s+(?:the\s+)?(.+?)\s+(on top of|onto|into|inside|on|in)\s+(?:the\s+)?(.+)$", text)
        if not m:
            return plan
        left, plan.relation, plan.target_phrase = m.group(1), m.group(2), m.group(3)
        # "put the black bowl in the middle on the plate": "in the middle" says which bowl, not where to.
        where = re.match(rf"^((?:the\s+)?(?:{'|'.join(SIDE_WORDS)}))\s+(on top of|onto|into|inside|on|in)\s+(?:the\s+)?(.+)$",
                         plan.target_phrase)
        if where:
            left = f"{left} {plan.relation} {where.group(1)}"
            plan.relation, plan.target_phrase = where.group(2), where.group(3)
    plan.verb_ok = True
    for q in QUALIFIERS:
        parts = re.split(rf"\s+{q}\s+(?:the\s+)?", left, maxsplit=1)
        if len(parts) == 2:
            plan.obj_phrase, plan.qualifier = parts[0], q
            plan.ref_phrases = [p for p in re.split(r"\s+and\s+(?:the\s+)?", parts[1]) if p]
            break
    else:
        plan.obj_phrase = left
    plan.candidates = ground(plan.obj_phrase, objects)
    targets = ground(plan.target_phrase, objects)
    plan.targets = [t for t in targets if t not in plan.candidates] or targets[:1]
    plan.target = plan.targets[0] if plan.targets else None
    plan.target_side = side_word(plan.target_phrase) if len(plan.targets) > 1 else None
    if len(plan.candidates) > 1:
        plan.refs = [r for p in plan.ref_phrases for r in ground(p, objects)[:1] if r not in plan.candidates]
        if not plan.refs:  # "on the left", "at the front": a place, not another object
            plan.side = side_word(" ".join([plan.obj_phrase, *plan.ref_phrases]))
    return plan


def choose_candidate(plan: TaskPlan, positions: dict[str, list[float]]) -> str:
    """Pick among same-named objects by the spatial qualifier, from located positions."""
    found = [c for c in plan.candidates if c in positions]
    if not found:
        return plan.candidates[0]
    refs = [positions[r] for r in plan.refs if r in positions]
    if len(found) > 1 and not refs and plan.side:
        return choose_by_side({c: positions[c] for c in found}, plan.side)
    if len(found) == 1 or not refs:
        return found[0]

    def dist2(a, b):
        return (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2

    if plan.qualifier == "between" and len(refs) >= 2:
        mid = [(refs[0][0] + refs[1][0]) / 2, (refs[0][1] + refs[1][1]) / 2]
        return min(found, key=lambda c: dist2(positions[c], mid))
    return min(found, key=lambda c: min(dist2(positions[c], r) for r in refs))


def choose_target(plan: TaskPlan, positions: dict[str, list[float]]) -> str | None:
    """The target among equally named ones: by the target phrase's spatial word, from located positions."""
    found = [t for t in plan.targets if t in positions]
    if len(found) > 1 and plan.target_side:
        return choose_by_side({t: positions[t] for t in found}, plan.target_side)
    return found[0] if found else plan.target


def grasp_geometry(name: str, loc: dict[str, Any]) -> dict[str, float]:
    """Where to close the fingers on an object, from its located box (bowls: pinch the rim wall)."""
    x, y, _ = loc["position"]
    ex, ey, ez = loc["extent"]
    top = loc["top_z"]
    if "bowl" in name or "ramekin" in name:
        return {"x": x, "y": y + ey / 2 - 0.012, "z": top - 0.02, "dy": ey / 2 - 0.012, "height": ez}
    return {"x": x, "y": y, "z": top - min(0.03, ez / 2), "dy": 0.0, "height": ez}


def place_height(target: str, tloc: dict[str, Any], held_height: float, relation: str) -> float:
    """Gripper height at release: above the target's top (a container's rim), never inside it."""
    return tloc["top_z"] + max(0.04, held_height * 0.6) + (0.03 if relation in ("in", "into", "inside") else 0.0)



# LIBERO checks "on" a plate (an object target) as On(obj, plate): the object's body origin within 3 cm of the
# plate's in x-y, touching it and not below it.  A mug is hollow and about as wide as the open gripper (7.8 cm):
# a grasp at the centre of its box lands the fingers on its rim and pinches one wall, so it hangs off the
# gripper.  On libero_10/4 (seed 0) the white mug hung 5.2 cm from the gripper (1.3 cm in x, 5.0 in y) and,
# carried with the gripper over the plate's centre, came to rest 4.6 cm from it: not "on" it, though the
# plate's box holds it.  The box centre itself is not the problem: before the grasp it is 0.2-0.5 cm from
# each mug's body origin (the handle included; the rim's centre is 1.7 cm away).  So after lifting, a fresh
# look at the held object and the gripper says how it really hangs, and the carry aims the object.
# The code cells carry this function's own source.
def aim_held(px, py, dy, held_pos, eef_pos, tol=0.02):
    """Gripper (x, y) that puts the held object's centre, not the gripper, where (px, py) meant it to go.

    (px, py) is the gripper spot for an object hanging as grasped: its centre `dy` behind the grasp in y
    (bowls are pinched by the rim wall, dy > 0; else 0).  `held_pos` is a locate of the held object after
    the lift, `eef_pos` the gripper's.  Hanging within `tol` of that, or a look more than 10 cm off (not
    the object as held): (px, py) unchanged; else shifted by how it really hangs.
    """
    ox, oy = held_pos[0] - eef_pos[0], held_pos[1] - eef_pos[1]
    if (abs(ox) <= tol and abs(oy + dy) <= tol) or ox * ox + oy * oy > 0.1 ** 2:
        return px, py
    return px - ox, py - dy - oy

# "Beside" goals.  LIBERO checks them as On(object, <table>_<reference>_<side>_region): the object's body
# origin within a 10 x 10 cm square of the table (ranges half-width 0.05 in x and y) and at most ~10 cm
# above it.  The squares are fixed on the table, laid out next to where the reference starts (BDDL,
# libero_90): KITCHEN_SCENE10's plate starts at (0, 0) and its right region is centred at (0, +0.10);
# LIVING_ROOM_SCENE6's plate at (0.15, 0), its left / right regions at (0.15, -0.10) / (0.15, +0.10);
# KITCHEN_SCENE9's white mug at (-0.10, -0.25), its front region at (0, -0.25); STUDY_SCENE3's caddy at
# (-0.20, -0.14), its right region at (-0.20, +0.15).  The same sides as choose_by_side (right +y, left
# -y, front +x, back -x), and the distance grows with the reference: a real `locate` measures the plate
# 0.12 m across, the mug 0.09 m, the caddy 0.41 m long in y.  So the planner sets the object down with
# its box a small gap from the reference's box on the named side: on libero_90/37, /34, /69, /76 (seeds
# 0 and 1) that puts its centre 0-3 cm from the region's centre, inside the 5 cm the check allows.
# The code cells carry these two functions' own source.
def beside_spot(ref_pos, ref_ext, ref_top, obj_pos, obj_ext, obj_top, side, gap=0.02):
    """Where to set an object down beside a reference: (x, y) of its centre and z of its bottom.

    Its box `gap` metres from the reference's box on `side` (left -y, right +y, front +x, back -x;
    'next': the side it is on already), level with the reference's own bottom (the table), 3 cm above it.
    """
    if side == "next":
        dx, dy = obj_pos[0] - ref_pos[0], obj_pos[1] - ref_pos[1]
        side = ("front" if dx > 0 else "back") if abs(dx) > abs(dy) else ("right" if dy > 0 else "left")
    axis = 1 if side in ("left", "right") else 0
    sign = 1 if side in ("right", "front") else -1
    spot = [ref_pos[0], ref_pos[1]]
    spot[axis] += sign * (ref_ext[axis] / 2 + obj_ext[axis] / 2 + gap)
    return spot[0], spot[1], ref_top - ref_ext[2] + 0.03


def beside_placed(obj_pos, obj_ext, obj_top, ref_pos, ref_ext, ref_top, side):
    """Does a fresh look put the object where beside_spot says (within 4 cm), resting on the table?"""
    x, y, bottom = beside_spot(ref_pos, ref_ext, ref_top, obj_pos, obj_ext, obj_top, side)
    return abs(obj_pos[0] - x) <= 0.04 and abs(obj_pos[1] - y) <= 0.04 and obj_top - obj_ext[2] <= bottom + 0.03


#: "put both the X and the Y in the Z"
_BOTH_AND = re.compile(r"^(put|place|move)\s+both\s+(?:the\s+)?(.+?)\s+and\s+(?:the\s+)?(.+?)\s+"
                       r"(on top of|onto|into|inside|on|in)\s+(?:the\s+)?(.+)$")
#: "put both moka pots on the stove"
_BOTH_PLURAL = re.compile(r"^(put|place|move)\s+both\s+(?:the\s+)?(.+?)s\s+(on top of|onto|into|inside|on|in)\s+(?:the\s+)?(.+)$")
#: An "and" that starts a second clause: a new verb, but not "and place it ..." (the object of a pick).
_CLAUSE_AND = re.compile(r"\s+and\s+(?:then\s+)?(?=(?:(?:put|place|set|move|drop)\b(?!\s+(?:it|them)\b)"
                         r"|turn\b|open\b|close\b|switch\b|stack\b))")
_ARTICULATE = re.compile(r"^(open|close|turn on|turn off|switch on|switch off)\s+(?:the\s+)?(.+?)(?:\s+(on|off))?$")


def split_subgoals(instruction: str) -> list[str]:
    """Split a composite instruction into clauses done in order; pronouns name the previous clause's fixture.

    'put both the soup and the sauce in the basket' -> two puts; 'turn on the
    stove and put the frying pan on it' -> 'turn on the stove', 'put the
    frying pan on the stove'.  A single instruction comes back alone.
    """
    text = " ".join(instruction.lower().strip().rstrip(".").split())
    m = _BOTH_AND.match(text)
    if m:
        verb, a, b, rel, tgt = m.groups()
        return [f"{verb} the {a} {rel} the {tgt}", f"{verb} the {b} {rel} the {tgt}"]
    m = _BOTH_PLURAL.match(text)
    if m:
        verb, noun, rel, tgt = m.groups()
        return [f"{verb} the {noun} {rel} the {tgt}"] * 2
    out: list[str] = []
    antecedent = None
    for clause in _CLAUSE_AND.split(text):
        if antecedent:
            clause = re.sub(r"\b(?:it|them)\b", antecedent, clause)
        art = _ARTICULATE.match(clause)
        if art:
            antecedent = "the " + art.group(2)
        else:
            plan = parse_task(clause, [])
            antecedent = ("the " + plan.target_phrase) if plan.verb_ok else antecedent
        out.append(clause)
    return out


@dataclass
class SubGoal:
    """One clause of an instruction and what the planner makes of it."""

    clause: str
    kind: str
    """'pick_place', or the articulation: 'open', 'close', 'turn_on', 'turn_off'; 'unknown' otherwise."""
    plan: TaskPlan | None = None
    fixture: str | None = None

    @property
    def understood(self) -> bool:
        return self.kind == "pick_place" and self.plan is not None and self.plan.understood


def plan_subgoals(instruction: str, objects: list[str]) -> list[SubGoal]:
    """Sub-goals of an instruction grounded in the scene; 'both X' with one phrase takes distinct objects."""
    goals = []
    for clause in split_subgoals(instruction):
        art = _ARTICULATE.match(clause)
        if art:
            verb = art.group(1).replace("switch", "turn")
            if art.group(3):  # "turn the stove on"
                verb = f"turn {art.group(3)}"
            fixture = (ground(art.group(2), objects) or [None])[0]
            goals.append(SubGoal(clause, verb.replace(" ", "_"), fixture=fixture))
            continue
        plan = parse_task(clause, objects)
        goals.append(SubGoal(clause, "pick_place" if plan.verb_ok else "unknown", plan=plan))
    # Identical clauses ("both moka pots"): the k-th takes the k-th same-named object.
    for i, g in enumerate(goals):
        twins = [h for h in goals[:i] if h.clause == g.clause and h.plan is not None]
        if g.plan is not None and twins and len(g.plan.candidates) > len(twins) and not g.plan.refs:
            g.plan.candidates = [g.plan.candidates[len(twins)]]
            twins[0].plan.candidates = twins[0].plan.candidates[:1]
    return goals


def placed_check(obj: dict[str, Any], target: dict[str, Any], relation: str, beside: str | None = None) -> bool:
    """Does a fresh `locate` of the object say it rests on / in the target (from the target's box)?

    Not seen after a release into a container counts as inside it: baskets and
    drawers hide what lies in them from the scene cameras.  With relation 'beside', the target is
    the reference and `beside` its side (beside_placed).
    """
    if not obj.get("found"):
        return relation in ("in", "into", "inside")
    if relation == "beside":
        return beside_placed(obj["position"], obj["extent"], obj["top_z"], target["position"], target["extent"],
                             target["top_z"], beside)
    (ox, oy, _), (tx, ty, _) = obj["position"], target["position"]
    ex, ey, ez = target["extent"]
    inside = abs(ox - tx) <= ex / 2 + 0.02 and abs(oy - ty) <= ey / 2 + 0.02
    return inside and obj["top_z"] > target["top_z"] - ez + 0.01


class ScriptedPlanner:
    """Deterministic planner that writes tool calls or code cells; see the module docstring."""

    name = "scripted"

    def __init__(self, model: str = "scripted-v1", estimator=None):
        from agents.usage import UsageEstimator

        self.model = model
        self.estimator = estimator or UsageEstimator()
        self._episode_key = None
        self._n = 0

    # -- the Planner protocol -------------------------------------------
    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
        t0 = time.perf_counter()
        key = id(messages[0]) if messages else None
        if key != self._episode_key:
            self._episode_key = key
            self.estimator.reset()
            names = {t["function"]["name"] for t in tools}
            task_text = _text(messages[1]["content"])
            has_vla = "vla" in names or "robo.vla(" in _text(messages[0]["content"])
            self._mind = _mind_class(_text(messages[0]["content"]), names)(task_text, has_vla)
        self._n += 1
        name, args, text = self._mind.step(_last_result(messages))
        call = ToolCall(id=f"call_{self._n}", name=name, arguments=json.dumps(args))
        usage, raw = self.estimator.estimate(messages, tools, [text, call] if text else [call])
        return PlannerReply(text=text, tool_calls=[call], usage=usage, usage_source="estimated",
                            raw_usage=raw, latency_s=time.perf_counter() - t0)


def _mind_class(system_text: str, tool_names: set[str]):
    """The strategy family for this interface: two-arm robots get agents.planners.scripted_bimanual's."""
    from agents.planners import scripted_bimanual as bimanual

    code = "python" in tool_names
    if bimanual.is_two_arm_interface(system_text, tool_names):
        return bimanual.BimanualCodeMind if code else bimanual.BimanualToolMind
    return CodeMind if code else ToolMind


def _text(content) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content or ""


def _last_result(messages: list[dict[str, Any]]) -> str | None:
    """Text of the newest tool result (what the previous action returned)."""
    for m in reversed(messages):
        if m["role"] == "tool":
            return m["content"]
        if m["role"] == "assistant":
            return None
    return None


def _parse_card(task_text: str) -> tuple[str, list[str]]:
    instr = re.search(r"Task:\s*(.+)", task_text).group(1).strip()
    objs = re.search(r"Objects in the scene[^:]*:\s*(.+)", task_text).group(1)
    return instr, [o.strip() for o in objs.split(",") if o.strip()]


class _Mind:
    """Shared parse of the task card."""

    def __init__(self, task_text: str, has_vla: bool):
        self.instruction, self.objects = _parse_card(task_text)
        self.plan = parse_task(self.instruction, self.objects)
        self.goals = plan_subgoals(self.instruction, self.objects)
        self.has_vla = has_vla
        self.gen = self.script()
        self.result: str | None = None

    def step(self, result: str | None) -> tuple[str, dict[str, Any], str]:
        self.result = result
        try:
            return next(self.gen)
        except StopIteration:
            return "finish", {"status": "stuck", "summary": "No further idea."}, ""

    def script(self):
        raise NotImplementedError


class ToolMind(_Mind):
    """Tool calling: one primitive per call, reacting to each JSON result."""

    def _json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.result or "{}")
        except json.JSONDecodeError:
            return {}
        return data.get("result", data) if isinstance(data, dict) else {}

    def script(self):
        if len(self.goals) > 1:
            yield from self._composite()
            return
        plan = self.plan
        if self.has_vla:
            for _ in range(MAX_VLA_TRIES):
                yield "vla", {"instruction": self.instruction}, "I will ask the VLA policy to do the task."
                if self._json().get("success"):
                    return
        if not plan.understood:
            yield "finish", {"status": "stuck", "summary": f"Cannot map the instruction to a pick-and-place: {self.instruction}"}, ""
            return
        if (yield from self._pick_place(plan)) is None:
            return
        # Measure again and try once more, as the code agent's retry cell does (CELL_RETRY): both
        # interfaces get the same persistence; what differs is what a retry costs.
        if (yield from self._pick_place(plan, attempts=1)) is None:
            return
        yield "finish", {"status": "stuck", "summary": "Placed the object but the task is not solved."}, ""

    def _pick_place(self, plan: TaskPlan, verify: bool = False, attempts: int = MAX_PICK_TRIES):
        """Locate, grasp, carry, release; with `verify`, a fresh locate decides success (True/False).

        Returns None after it has finished the episode itself (nothing to see).
        """
        for attempt in range(attempts):
            positions, locs = {}, {}
            for name in dict.fromkeys(plan.candidates + plan.refs + plan.targets):
                yield "locate", {"name": name}, f"Locate {name}."
                r = self._json()
                if r.get("found"):
                    positions[name], locs[name] = r["position"], r
            obj = choose_candidate(plan, positions)
            target = choose_target(plan, positions)
            if obj not in locs or target not in locs:
                yield "finish", {"status": "stuck", "summary": f"Could not see {obj} or {target}."}, ""
                return None
            g = grasp_geometry(obj, locs[obj])
            tz = locs[target]["top_z"]
            lift = max(locs[obj]["top_z"], tz) + 0.15
            yield "set_gripper", {"action": "open"}, "Open the gripper."
            yield "move_to", {"xyz": [g["x"], g["y"], g["z"] + 0.10]}, f"Move above {obj}."
            yield "move_to", {"xyz": [g["x"], g["y"], g["z"]]}, "Descend to the grasp."
            yield "set_gripper", {"action": "close"}, "Close the gripper."
            if not self._json().get("holding"):
                yield "move_to", {"xyz": [g["x"], g["y"], g["z"] + 0.10]}, "The grasp missed; back off and retry."
                continue
            yield "move_to", {"xyz": [g["x"], g["y"], lift]}, "Lift."
            yield "locate", {"name": obj}, f"See how {obj} hangs in the gripper."
            held = self._json()
            yield "state", {}, "Where is the gripper?"
            eef = self._json().get("eef_pos")
            tl = locs[target]
            if plan.relation == "beside":  # on the table beside the reference, the object's bottom just above it
                ol = locs[obj]
                sx, sy, bottom = beside_spot(tl["position"], tl["extent"], tl["top_z"], ol["position"], ol["extent"],
                                             ol["top_z"], plan.beside)
                px, py, release_z = sx, sy + g["dy"], bottom + g["z"] - (ol["top_z"] - ol["extent"][2])
                where = f"to the {plan.beside} of {target}" if plan.beside != "next" else f"next to {target}"
            else:
                px, py = tl["position"][0], tl["position"][1] + g["dy"]
                release_z, where = place_height(target, tl, g["height"], plan.relation), f"over {target}"
            if held.get("found") and eef:
                px, py = aim_held(px, py, g["dy"], held["position"], eef)
            yield "move_to", {"xyz": [px, py, lift]}, f"Carry {where}."
            yield "state", {}, "Check the grasp."
            if not self._json().get("holding"):
                continue
            yield "move_to", {"xyz": [px, py, release_z]}, "Lower."
            yield "release", {"lift_m": 0.08}, "Release."
            if verify:
                yield "locate", {"name": obj}, f"Check where {obj} ended up."
                if placed_check(self._json(), tl, plan.relation, plan.beside):
                    return True
        return False

    def _composite(self):
        """Sub-goals in order, stopping at the first that fails; then one more round over the unfinished
        ones with a single VLA try each, as the code agent's RETRY_GOALS cell does."""
        done: set[int] = set()
        failed = None
        for vla_tries in (MAX_VLA_TRIES, 1):
            failed = None
            for k, goal in enumerate(self.goals):
                if k in done:
                    continue
                if not (yield from self._subgoal(goal, vla_tries)):
                    failed = goal
                    break
                done.add(k)
            if failed is None or not failed.understood:
                break  # the code cells stop too when a sub-goal has no strategy besides the VLA
        if failed is not None:
            yield "finish", {"status": "stuck", "summary": f"Could not complete the sub-goal: {failed.clause}"}, ""
            return
        yield "finish", {"status": "stuck", "summary": "Every sub-goal looks done but the task is not solved."}, ""

    def _subgoal(self, goal: SubGoal, vla_tries: int = MAX_VLA_TRIES):
        if self.has_vla:
            for _ in range(vla_tries):
                yield "vla", {"instruction": goal.clause}, f"Ask the VLA policy: {goal.clause}."
                r = self._json()
                reason = str(r.get("stopped_reason", ""))
                if r.get("success"):
                    return True
                if reason.startswith("not understood"):
                    break
                if not goal.understood:
                    # An articulation cannot be checked with locate: trust a policy that says it finished.
                    if reason == "policy_done":
                        return True
                    continue
                if (yield from self._check(goal.plan)):
                    return True
        if not goal.understood:
            return False
        return bool((yield from self._pick_place(goal.plan, verify=True)))

    def _check(self, plan: TaskPlan):
        """Locate the sub-goal's objects and say whether the object now rests on/in the target."""
        positions, locs = {}, {}
        for name in dict.fromkeys(plan.candidates + plan.refs + plan.targets):
            yield "locate", {"name": name}, f"Check {name}."
            r = self._json()
            locs[name] = r
            if r.get("found"):
                positions[name] = r["position"]
        obj = choose_candidate(plan, positions)
        target = choose_target(plan, positions)
        return target in positions and placed_check(locs.get(obj, {}), locs[target], plan.relation, plan.beside)


#: Locate every name of an iterable into `seen`, printing what was found (NAMES is filled in).
_LOCATE_LOOP = '''\
seen = {{}}
for name in dict.fromkeys(NAMES):
    loc = robo.locate(name)
    if loc.found:
        seen[name] = loc
        print(name, "at", [round(v, 3) for v in loc.position], "top", round(loc.top_z, 3))
    else:
        print(name, "not found")
'''

CELL_LOCATE = '''\
plan_candidates = {candidates!r}
plan_refs = {refs!r}
plan_targets = {targets!r}
plan_target = plan_targets[0]
''' + _LOCATE_LOOP.replace("NAMES", "plan_candidates + plan_refs + plan_targets")

#: The cell's own copy of choose_by_side (same source), for "the right plate", "the bowl on the left".
SIDE_FN = inspect.getsource(choose_by_side)

CELL_CHOOSE = '''\
def dist2(a, b):
    return (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2

found = [c for c in plan_candidates if c in seen]
refs = [seen[r].position for r in plan_refs if r in seen]
if len(found) > 1 and refs:
    if {between!r} and len(refs) >= 2:
        anchor = [(refs[0][0] + refs[1][0]) / 2, (refs[0][1] + refs[1][1]) / 2]
        obj = min(found, key=lambda c: dist2(seen[c].position, anchor))
    else:
        obj = min(found, key=lambda c: min(dist2(seen[c].position, r) for r in refs))
elif len(found) > 1 and {side!r}:
    obj = choose_by_side({{c: seen[c].position for c in found}}, {side!r})
else:
    obj = found[0] if found else None
seen_targets = [t for t in plan_targets if t in seen]
if len(seen_targets) > 1 and {target_side!r}:
    plan_target = choose_by_side({{t: seen[t].position for t in seen_targets}}, {target_side!r})
elif seen_targets:
    plan_target = seen_targets[0]
print("object:", obj, "| target:", plan_target, "seen" if plan_target in seen else "not seen")
'''


def locate_and_choose_cell(plan: TaskPlan) -> str:
    """The first cell of a pick-and-place: locate everything, then choose the object and the target."""
    return (CELL_LOCATE.format(candidates=plan.candidates, refs=plan.refs, targets=plan.targets) + "\n" + SIDE_FN + "\n"
            + CELL_CHOOSE.format(between=plan.qualifier == "between", side=plan.side, target_side=plan.target_side))

CELL_VLA = '''\
for attempt in range({tries}):
    r = robo.vla({instruction!r})
    print("vla attempt", attempt + 1, "success:", r.success, "steps:", r.steps)
    if r.success:
        break
'''

#: The cells' own copy of aim_held (same source; braces doubled for the templates' format).
AIM_FN = inspect.getsource(aim_held)

CELL_PICK_PLACE_FN = AIM_FN.replace("{", "{{").replace("}", "}}") + '''

def pick_and_place(obj, target, relation={relation!r}):
    """Guarded pick-and-place from fresh measurements; returns a short report."""
    o, t = robo.locate(obj), robo.locate(target)
    if not (o.found and t.found):
        return "cannot see " + (obj if not o.found else target)
    x, y, _ = o.position
    ex, ey, ez = o.extent
    bowl = "bowl" in obj or "ramekin" in obj
    dy = ey / 2 - 0.012 if bowl else 0.0
    gz = o.top_z - (0.02 if bowl else min(0.03, ez / 2))
    lift = max(o.top_z, t.top_z) + 0.15
    robo.set_gripper("open")
    if not robo.move_to([x, y + dy, gz + 0.10]).reached:
        return "could not reach above the object"
    robo.move_to([x, y + dy, gz])
    if not robo.set_gripper("close").holding:
        robo.move_to([x, y + dy, gz + 0.10])
        return "grasp missed"
    robo.move_to([x, y + dy, lift])
    held, eef = robo.locate(obj), robo.state().eef_pos
    px, py = t.position[0], t.position[1] + dy
    if held.found:  # carry the object, not the gripper, over the spot: a mug pinched by one wall hangs off-centre
        px, py = aim_held(px, py, dy, held.position, eef)
    robo.move_to([px, py, lift])
    if not robo.state().holding:
        return "dropped while carrying"
    release_z = t.top_z + max(0.04, ez * 0.6) + (0.03 if relation in ("in", "into", "inside") else 0.0)
    robo.move_to([px, py, release_z])
    robo.release(0.08)
    return "placed"
'''

CELL_PICK_PLACE = CELL_PICK_PLACE_FN + '''
for attempt in range({tries}):
    report = pick_and_place(obj, plan_target)
    print("attempt", attempt + 1, ":", report)
    if report == "placed":
        break
if report != "placed":
    robo.show("agentview")
'''

CELL_RETRY = '''\
report = pick_and_place(obj, plan_target)
print("retry:", report)
if report != "placed":
    robo.show("agentview")
'''


#: The cells' own copies of beside_spot and beside_placed (same source), for "to the right of the plate".
BESIDE_FN = inspect.getsource(beside_spot) + "\n\n" + inspect.getsource(beside_placed)

# For a goal beside a reference (relation 'beside <side>' in the cells) pick_and_place and placed branch
# at the carry, the release and the check; the cells of every other task keep the plain text.
_CARRY_ON = "    px, py = t.position[0], t.position[1] + dy\n"
_CARRY_BESIDE = '''\
    if relation.startswith("beside"):
        px, py, bottom = beside_spot(t.position, t.extent, t.top_z, o.position, o.extent, o.top_z, relation.split()[-1])
        py += dy
    else:
        px, py = t.position[0], t.position[1] + dy
'''
_RELEASE_ON = '''\
    release_z = t.top_z + max(0.04, ez * 0.6) + (0.03 if relation in ("in", "into", "inside") else 0.0)
'''
_RELEASE_BESIDE = '''\
    if relation.startswith("beside"):  # the object's bottom just above the table
        release_z = bottom + gz - (o.top_z - ez)
    else:
''' + "    " + _RELEASE_ON
_PLACED_ON = '''\
    if not o.found:
        return relation in ("in", "into", "inside")
'''
_PLACED_BESIDE = _PLACED_ON + '''\
    if relation.startswith("beside"):
        return beside_placed(o.position, o.extent, o.top_z, t.position, t.extent, t.top_z, relation.split()[-1])
'''


def with_beside(template: str) -> str:
    """A cell template whose pick_and_place (and placed, where it has one) also handle 'beside <side>'."""
    assert _CARRY_ON in template and _RELEASE_ON in template
    for old, new in ((_CARRY_ON, _CARRY_BESIDE), (_RELEASE_ON, _RELEASE_BESIDE), (_PLACED_ON, _PLACED_BESIDE)):
        template = template.replace(old, new)
    return template


def cell_relation(plan: TaskPlan | None) -> str:
    """The relation a cell passes to pick_and_place: 'beside right' for a goal beside a reference."""
    if plan is None:
        return ""
    return f"beside {plan.beside}" if plan.relation == "beside" else plan.relation


CELL_GOALS = '''\
goals = {goals!r}
''' + _LOCATE_LOOP.replace(
    "NAMES", 'n for g in goals if g["kind"] == "pick_place" for n in g["candidates"] + g["refs"] + g["targets"]') + '''
def dist2(a, b):
    return (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2

def choose(g):
    found = [c for c in g["candidates"] if c in seen]
    refs = [seen[r].position for r in g["refs"] if r in seen]
    if len(found) > 1 and refs:
        if g["between"] and len(refs) >= 2:
            anchor = [(refs[0][0] + refs[1][0]) / 2, (refs[0][1] + refs[1][1]) / 2]
            return min(found, key=lambda c: dist2(seen[c].position, anchor))
        return min(found, key=lambda c: min(dist2(seen[c].position, r) for r in refs))
    if len(found) > 1 and g["side"]:
        return choose_by_side({{c: seen[c].position for c in found}}, g["side"])
    return found[0] if found else None

def choose_target(g):
    found = [t for t in g["targets"] if t in seen]
    if len(found) > 1 and g["target_side"]:
        return choose_by_side({{t: seen[t].position for t in found}}, g["target_side"])
    return found[0] if found else g["target"]

for g in goals:
    if g["kind"] == "pick_place":
        g["obj"] = choose(g)
        g["target"] = choose_target(g)
    print("sub-goal:", g["clause"], "->", g.get("obj"), g["kind"], g.get("target"))
'''

CELL_GOALS_ACT = CELL_PICK_PLACE_FN + '''
def placed(obj, target, relation):
    """A fresh look: does obj rest on/in target? Unseen after a drop into a container counts as inside."""
    o, t = robo.locate(obj), robo.locate(target)
    if not t.found:
        return False
    if not o.found:
        return relation in ("in", "into", "inside")
    near = abs(o.position[0] - t.position[0]) <= t.extent[0] / 2 + 0.02 and abs(o.position[1] - t.position[1]) <= t.extent[1] / 2 + 0.02
    return near and o.top_z > t.top_z - t.extent[2] + 0.01

def do_goal(g, vla_tries={vla_tries}):
    if {use_vla!r}:
        for attempt in range(vla_tries):
            r = robo.vla(g["clause"])
            if r.success:
                return "done (task solved)"
            if r.stopped_reason.startswith("not understood"):
                break
            if g["kind"] != "pick_place":
                if r.stopped_reason == "policy_done":
                    return "done by the vla"
            elif g.get("obj") and placed(g["obj"], g["target"], g["relation"]):
                return "done by the vla"
    if g["kind"] != "pick_place" or not g.get("obj"):
        return "no strategy"
    report = "not tried"
    for attempt in range({tries}):
        report = pick_and_place(g["obj"], g["target"], g["relation"])
        if report == "placed" and placed(g["obj"], g["target"], g["relation"]):
            return "done"
    return "failed: " + report

for g in goals:
    if g.get("status", "").startswith("done"):
        continue
    g["status"] = do_goal(g)
    print(g["clause"], "->", g["status"])
    if not g["status"].startswith("done"):
        robo.show("agentview")
        break
'''

RETRY_GOALS = '''\
for g in goals:
    if g.get("status", "").startswith("done"):
        continue
    g["status"] = do_goal(g, vla_tries=1)
    print("retry:", g["clause"], "->", g["status"])
    if not g["status"].startswith("done"):
        robo.show("agentview")
        break
'''


class CodeMind(_Mind):
    """Code cells: locate and choose in one cell, then guarded chains with local retries."""

    def script(self):
        if len(self.goals) > 1:
            yield from self._composite()
            return
        plan = self.plan
        if self.has_vla:
            yield "python", {"code": CELL_VLA.format(tries=MAX_VLA_TRIES, instruction=self.instruction)}, "Try the VLA policy first, retrying locally."
            if "success: True" in (self.result or ""):
                return
        if not plan.understood:
            yield "finish", {"status": "stuck", "summary": f"Cannot map the instruction to a pick-and-place: {self.instruction}"}, ""
            return
        code = locate_and_choose_cell(plan)
        yield "python", {"code": code}, "Locate the objects and choose which one the instruction means."
        out = self.result or ""
        if "object: None" in out or "not seen" in out or "Error" in out:
            yield "finish", {"status": "stuck", "summary": "Could not see the object or the target."}, ""
            return
        if plan.relation == "beside":
            code = BESIDE_FN + "\n\n" + with_beside(CELL_PICK_PLACE).format(relation=cell_relation(plan), tries=MAX_PICK_TRIES)
        else:
            code = CELL_PICK_PLACE.format(relation=plan.relation, tries=MAX_PICK_TRIES)
        yield "python", {"code": code}, "Pick and place with checks and a local retry."
        if "Traceback" in (self.result or ""):
            yield "python", {"code": CELL_RETRY}, "Retry after the error."
        else:
            yield "python", {"code": CELL_RETRY}, "Not solved yet: measure again and retry."
        yield "finish", {"status": "stuck", "summary": "Placed the object but the task is not solved."}, ""

    def _composite(self):
        """One cell locates and chooses for every sub-goal; one runs them in order with checks; one retries."""
        goals = [{"clause": g.clause, "kind": g.kind, "candidates": g.plan.candidates if g.plan else [],
                  "refs": g.plan.refs if g.plan else [], "target": (g.plan.target if g.plan else None) or g.fixture,
                  "targets": g.plan.targets if g.plan else [], "side": g.plan.side if g.plan else None,
                  "target_side": g.plan.target_side if g.plan else None,
                  "between": bool(g.plan and g.plan.qualifier == "between"),
                  "relation": cell_relation(g.plan)} for g in self.goals]
        yield "python", {"code": SIDE_FN + "\n" + CELL_GOALS.format(goals=goals)}, "Split the task into sub-goals and locate their objects."
        fmt = dict(relation="on", use_vla=self.has_vla, vla_tries=MAX_VLA_TRIES, tries=MAX_PICK_TRIES)
        if any(g.plan is not None and g.plan.relation == "beside" for g in self.goals):
            act = BESIDE_FN + "\n\n" + with_beside(CELL_GOALS_ACT).format(**fmt)
        else:
            act = CELL_GOALS_ACT.format(**fmt)
        yield "python", {"code": act}, "Do the sub-goals in order, checking each with a fresh look."
        if "no strategy" in (self.result or ""):
            yield "finish", {"status": "stuck", "summary": "No strategy for a sub-goal the VLA could not do."}, ""
            return
        yield "python", {"code": RETRY_GOALS}, "Not solved yet: retry the unfinished sub-goals."
        yield "finish", {"status": "stuck", "summary": "Tried every sub-goal; the task is not solved."}, ""
