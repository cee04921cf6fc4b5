"""The `scripted` planner: the embedded, offline, deterministic stand-in for an LLM.

It sees exactly what an LLM would — the system prompt, the task message,
tool results, cell output and the images it asked for — and writes real tool
calls (tool calling) or real Python cells (code).  It never reads simulator
state: object positions come from `locate` results it parsed out of the
conversation (tool calling) or are computed by the cell it wrote (code).
It handles pick-and-place instructions ("pick up the X ... and place it on
the Y", "put the X in the Y"); for anything else it tries the VLA once (when
the interface has one) and then gives up honestly.

Token usage is *estimated* from the exact serialized prompt with a real BPE
tokenizer, the image-token formula and a prefix-cache model
(`agents.usage.UsageEstimator`); every call is marked `usage_source='estimated'`.
"""
from __future__ import annotations

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

    @property
    def understood(self) -> bool:
        return bool(self.verb_ok and self.candidates and self.target)


def _words(text: str) -> set[str]:
    stop = {"the", "a", "an", "of", "and", "it", "to"}
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if w and w not in stop and not w.isdigit()}


def ground(phrase: str, objects: list[str]) -> list[str]:
    """Scene objects whose name words best overlap the phrase (all ties)."""
    want = _words(phrase)
    scored = [(len(want & _words(o.replace("_", " "))), o) for o in objects]
    best = max((s for s, _ in scored), default=0)
    return [o for s, o in scored if s == best and s > 0]


def parse_task(instruction: str, objects: list[str]) -> TaskPlan:
    """Split a pick-and-place instruction into object, qualifier, relation and target."""
    plan = TaskPlan(instruction, objects)
    text = instruction.lower().strip().rstrip(".")
    m = re.match(rf"^{VERBS}\s+(?:up\s+)?(?:the\s+)?(.+?)\s+and\s+(?:place|put|set|drop|move)\s+it\s+(on top of|on|onto|in|into|inside|to)\s+(?:the\s+)?(.+)$", text)
    if not m:
        m = re.match(rf"^{VERBS}\s+(?:the\s+)?(.+?)\s+(on top of|onto|into|inside|on|in)\s+(?:the\s+)?(.+)$", text)
    if not m:
        return plan
    plan.verb_ok = True
    left, plan.relation, plan.target_phrase = m.group(1), m.group(2), m.group(3)
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
    plan.target = next((t for t in targets if t not in plan.candidates), targets[0] if targets else None)
    if len(plan.candidates) > 1:
        plan.refs = [r for p in plan.ref_phrases for r in ground(p, objects)[:1] if r not in plan.candidates]
    return plan


def choose_candidate(plan: TaskPlan, positions: dict[str, list[float]]) -> str:
    """Pick among same-named objects by the spatial qualifier, from located positions."""
    found = [c for c in plan.candidates if c in positions]
    if not found:
        return plan.candidates[0]
    refs = [positions[r] for r in plan.refs if r in positions]
    if len(found) == 1 or not refs:
        return found[0]

    def dist2(a, b):
        return (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2

    if plan.qualifier == "between" and len(refs) >= 2:
        mid = [(refs[0][0] + refs[1][0]) / 2, (refs[0][1] + refs[1][1]) / 2]
        return min(found, key=lambda c: dist2(positions[c], mid))
    return min(found, key=lambda c: min(dist2(positions[c], r) for r in refs))


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
            self._mind = (CodeMind if "python" in names else ToolMind)(task_text, has_vla)
        self._n += 1
        name, args, text = self._mind.step(_last_result(messages))
        call = ToolCall(id=f"call_{self._n}", name=name, arguments=json.dumps(args))
        usage, raw = self.estimator.estimate(messages, tools, [text, call] if text else [call])
        return PlannerReply(text=text, tool_calls=[call], usage=usage, usage_source="estimated",
                            raw_usage=raw, latency_s=time.perf_counter() - t0)


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
        plan = self.plan
        if self.has_vla:
            for _ in range(MAX_VLA_TRIES):
                yield "vla", {"instruction": self.instruction}, "I will ask the VLA policy to do the task."
                if self._json().get("success"):
                    return
        if not plan.understood:
            yield "finish", {"status": "stuck", "summary": f"Cannot map the instruction to a pick-and-place: {self.instruction}"}, ""
            return
        for attempt in range(MAX_PICK_TRIES):
            positions, locs = {}, {}
            for name in dict.fromkeys(plan.candidates + plan.refs + [plan.target]):
                yield "locate", {"name": name}, f"Locate {name}."
                r = self._json()
                if r.get("found"):
                    positions[name], locs[name] = r["position"], r
            obj = choose_candidate(plan, positions)
            if obj not in locs or plan.target not in locs:
                yield "finish", {"status": "stuck", "summary": f"Could not see {obj} or {plan.target}."}, ""
                return
            g = grasp_geometry(obj, locs[obj])
            tz = locs[plan.target]["top_z"]
            lift = max(locs[obj]["top_z"], tz) + 0.15
            yield "set_gripper", {"action": "open"}, "Open the gripper."
            yield "move_to", {"xyz": [g["x"], g["y"], g["z"] + 0.10]}, f"Move above {obj}."
            yield "move_to", {"xyz": [g["x"], g["y"], g["z"]]}, "Descend to the grasp."
            yield "set_gripper", {"action": "close"}, "Close the gripper."
            if not self._json().get("holding"):
                yield "move_to", {"xyz": [g["x"], g["y"], g["z"] + 0.10]}, "The grasp missed; back off and retry."
                continue
            yield "move_to", {"xyz": [g["x"], g["y"], lift]}, "Lift."
            tl = locs[plan.target]
            px, py = tl["position"][0], tl["position"][1] + g["dy"]
            yield "move_to", {"xyz": [px, py, lift]}, f"Carry over {plan.target}."
            yield "state", {}, "Check the grasp."
            if not self._json().get("holding"):
                continue
            yield "move_to", {"xyz": [px, py, place_height(plan.target, tl, g["height"], plan.relation)]}, "Lower."
            yield "release", {"lift_m": 0.08}, "Release."
        yield "finish", {"status": "stuck", "summary": "Placed the object but the task is not solved."}, ""


CELL_LOCATE = '''\
plan_candidates = {candidates!r}
plan_refs = {refs!r}
plan_target = {target!r}
seen = {{}}
for name in dict.fromkeys(plan_candidates + plan_refs + [plan_target]):
    loc = robo.locate(name)
    if loc.found:
        seen[name] = loc
        print(name, "at", [round(v, 3) for v in loc.position], "top", round(loc.top_z, 3))
    else:
        print(name, "not found")
'''

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
else:
    obj = found[0] if found else None
print("object:", obj, "| target:", plan_target, "seen" if plan_target in seen else "not seen")
'''

CELL_VLA = '''\
for attempt in range({tries}):
    r = robo.vla({instruction!r})
    print("vla attempt", attempt + 1, "success:", r.success, "steps:", r.steps)
    if r.success:
        break
'''

CELL_PICK_PLACE = '''\
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
    px, py = t.position[0], t.position[1] + dy
    robo.move_to([px, py, lift])
    if not robo.state().holding:
        return "dropped while carrying"
    release_z = t.top_z + max(0.04, ez * 0.6) + (0.03 if relation in ("in", "into", "inside") else 0.0)
    robo.move_to([px, py, release_z])
    robo.release(0.08)
    return "placed"

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


class CodeMind(_Mind):
    """Code cells: locate and choose in one cell, then guarded chains with local retries."""

    def script(self):
        plan = self.plan
        if self.has_vla:
            yield "python", {"code": CELL_VLA.format(tries=MAX_VLA_TRIES, instruction=self.instruction)}, "Try the VLA policy first, retrying locally."
            if "success: True" in (self.result or ""):
                return
        if not plan.understood:
            yield "finish", {"status": "stuck", "summary": f"Cannot map the instruction to a pick-and-place: {self.instruction}"}, ""
            return
        code = CELL_LOCATE.format(candidates=plan.candidates, refs=plan.refs, target=plan.target)
        code += "\n" + CELL_CHOOSE.format(between=plan.qualifier == "between")
        yield "python", {"code": code}, "Locate the objects and choose which one the instruction means."
        out = self.result or ""
        if "object: None" in out or "not seen" in out or "Error" in out:
            yield "finish", {"status": "stuck", "summary": "Could not see the object or the target."}, ""
            return
        yield "python", {"code": CELL_PICK_PLACE.format(relation=plan.relation, tries=MAX_PICK_TRIES)}, "Pick and place with checks and a local retry."
        if "Traceback" in (self.result or ""):
            yield "python", {"code": CELL_RETRY}, "Retry after the error."
        else:
            yield "python", {"code": CELL_RETRY}, "Not solved yet: measure again and retry."
        yield "finish", {"status": "stuck", "summary": "Placed the object but the task is not solved."}, ""
