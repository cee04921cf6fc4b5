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

The strategy is written once (`agents.planners.strategy`, plain Python over a
`robo`-shaped API) and cut into steps, each a cell.  The code mind sends each
step as a `python` cell; the tool mind runs the very same cell text against a
proxy `robo` whose every primitive is one tool call
(`agents.planners.tool_proxy`).  The step that follows depends only on the
step's output, read the same way in both.  So the two interfaces make the
same attempts, retries and checks by construction; only their cost differs.
Both read the success flag the interfaces report after acting
(`agents.feedback`) and then call finish, as the paper's agents do.

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

from agents.feedback import parse_success_line
from agents.planners import strategy
from agents.planners.base import PlannerReply, ToolCall
from agents.planners.strategy import aim_held, beside_placed, beside_spot, choose_by_side  # noqa: F401  (re-exported)
from agents.planners.tool_proxy import CellAsToolCalls, new_namespace

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


def goal_dict(goal: SubGoal) -> dict[str, Any]:
    """A sub-goal as the plain dict the strategy's functions read (agents.planners.strategy)."""
    p = goal.plan
    return {"clause": goal.clause, "kind": goal.kind, "candidates": p.candidates if p else [],
            "refs": p.refs if p else [], "target": (p.target if p else None) or goal.fixture,
            "targets": p.targets if p else [], "side": p.side if p else None,
            "target_side": p.target_side if p else None, "between": bool(p and p.qualifier == "between"),
            "relation": cell_relation(p)}


def cell_relation(plan: TaskPlan | None) -> str:
    """The relation pick_and_place takes: 'beside right' for a goal beside a reference, else the plan's."""
    if plan is None:
        return ""
    return f"beside {plan.beside}" if plan.relation == "beside" else plan.relation


class _Seen:
    """A position as `locate` would report it, for the strategy's choosers run on plain positions."""

    def __init__(self, position):
        self.position = position


def choose_candidate(plan: TaskPlan, positions: dict[str, list[float]]) -> str:
    """Pick among same-named objects by the spatial qualifier, from located positions (the cells' own chooser)."""
    seen = {n: _Seen(p) for n, p in positions.items()}
    return strategy.choose_object(goal_dict(SubGoal(plan.instruction, "pick_place", plan)), seen) or plan.candidates[0]


def choose_target(plan: TaskPlan, positions: dict[str, list[float]]) -> str | None:
    """The target among equally named ones: by the target phrase's spatial word, from located positions."""
    seen = {n: _Seen(p) for n, p in positions.items()}
    return strategy.choose_target(goal_dict(SubGoal(plan.instruction, "pick_place", plan)), seen)


# ---------------------------------------------------------------- the cells
# One text per step of a strategy; the code mind sends it, the tool mind runs it as tool calls.

def vla_cell(instruction: str, **options) -> str:
    opts = "".join(f", {k}={v!r}" for k, v in options.items())
    return strategy.library(strategy.try_vla) + f"r = try_vla(robo, {instruction!r}, {MAX_VLA_TRIES}{opts})\n"


def locate_and_choose_cell(plan: TaskPlan) -> str:
    """The first cell of a pick-and-place: locate everything, then choose the object and the target."""
    goal = goal_dict(SubGoal(plan.instruction, "pick_place", plan))
    return strategy.library(*strategy.CHOOSING) + f"""goal = {goal!r}
seen = locate_all(robo, goal["candidates"] + goal["refs"] + goal["targets"])
obj, target = choose_object(goal, seen), choose_target(goal, seen)
print("object:", obj, "| target:", target, "seen" if target in seen else "not seen")
"""


def pick_place_cell(tries: int = MAX_PICK_TRIES) -> str:
    """Pick and place the chosen object (the locate cell's obj, target, goal) with local retries."""
    return strategy.library(*strategy.ACTING) + f'report = pick_place_tries(robo, obj, target, goal["relation"], {tries})\n'


RETRY_CELL = 'report = pick_place_tries(robo, obj, target, goal["relation"], 1, label="retry")\n'


def goals_cell(goals: list[dict[str, Any]]) -> str:
    """A composite's first cell: its sub-goals, located and chosen."""
    return strategy.library(*strategy.GOALS) + f"goals = {goals!r}\nseen = choose_goals(robo, goals)\n"


def run_goals_cell(use_vla: bool) -> str:
    return strategy.library(*strategy.GOALS_ACTING) + (
        f"run_goals(robo, goals, use_vla={use_vla!r}, vla_tries={MAX_VLA_TRIES}, tries={MAX_PICK_TRIES})\n")


def retry_goals_cell(use_vla: bool) -> str:
    """One more round over the unfinished sub-goals, one VLA try each."""
    return f'run_goals(robo, goals, use_vla={use_vla!r}, vla_tries=1, tries={MAX_PICK_TRIES}, label="retry: ")\n'


# ---------------------------------------------------------------- the strategies
@dataclass
class Cell:
    """One step of a strategy: cell text and what the planner says it does."""

    code: str
    intent: str


@dataclass
class Finish:
    status: str
    summary: str


def _failed(output: str) -> bool:
    return "Traceback" in output or "Error" in output


def pick_place_flow(mind: "_Mind"):
    """One pick-and-place: the VLA first (with a local retry), then locate and choose, pick and place (with a
    local retry), one more try; each step's output decides the next, in both interfaces alike."""
    plan = mind.plan
    if mind.has_vla:
        yield Cell(vla_cell(mind.instruction), "Try the VLA policy first, retrying locally.")
    if not plan.understood:
        yield Finish("stuck", f"Cannot map the instruction to a pick-and-place: {mind.instruction}")
        return
    out = yield Cell(locate_and_choose_cell(plan), "Locate the objects and choose which one the instruction means.")
    if "object: None" in out or "not seen" in out or _failed(out):
        yield Finish("stuck", "Could not see the object or the target.")
        return
    yield Cell(pick_place_cell(), "Pick and place with checks and a local retry.")
    yield Cell(RETRY_CELL, "Not solved yet: measure again and retry.")
    yield Finish("stuck", "Placed the object but the task is not solved.")


def composite_flow(mind: "_Mind"):
    """Sub-goals: one cell locates and chooses for all, one does them in order with checks, one retries."""
    goals = [goal_dict(g) for g in mind.goals]
    yield Cell(goals_cell(goals), "Split the task into sub-goals and locate their objects.")
    out = yield Cell(run_goals_cell(mind.has_vla), "Do the sub-goals in order, checking each with a fresh look.")
    if "no strategy" in out:
        yield Finish("stuck", "No strategy for a sub-goal the VLA could not do.")
        return
    yield Cell(retry_goals_cell(mind.has_vla), "Not solved yet: retry the unfinished sub-goals.")
    yield Finish("stuck", "Tried every sub-goal; the task is not solved.")


class ScriptedPlanner:
    """Deterministic planner that writes tool calls or code cells; see the module docstring."""

    name = "scripted"

    def __init__(self, model: str = "scripted-v1", estimator=None):
        from agents.usage import UsageEstimator

        self.model = model
        self.estimator = estimator or UsageEstimator()
        self._episode_key = None
        self._mind: _Mind | None = None
        self._n = 0

    # -- the Planner protocol -------------------------------------------
    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
        t0 = time.perf_counter()
        key = id(messages[0]) if messages else None
        if key != self._episode_key:
            self._episode_key = key
            self.estimator.reset()
            if self._mind is not None:
                self._mind.close()
            self._mind = make_mind(_text(messages[0]["content"]), _text(messages[1]["content"]), tools)
        self._n += 1
        name, args, text = self._mind.step(_last_result(messages))
        call = ToolCall(id=f"call_{self._n}", name=name, arguments=json.dumps(args))
        usage, raw = self.estimator.estimate(messages, tools, [text, call] if text else [call])
        return PlannerReply(text=text, tool_calls=[call], usage=usage, usage_source="estimated",
                            raw_usage=raw, latency_s=time.perf_counter() - t0)

    def summarise(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> PlannerReply:
        """The compaction call (agents.compaction): a deterministic digest of the conversation, tokens estimated.

        Its own strategy state lives in the mind, so nothing it needs is lost with the summarised turns."""
        from agents import compaction

        return compaction.estimated_summary(self, messages, tools)


def make_mind(system_text: str, task_text: str, tools: list[dict[str, Any]]) -> "_Mind":
    """The mind for this interface (code cells when a `python` tool exists) and robot (two arms: move_both)."""
    from agents.planners import scripted_bimanual as bimanual

    names = {t["function"]["name"] for t in tools}
    has_vla = "vla" in names or "robo.vla(" in system_text
    two_arms = bimanual.is_two_arm_interface(system_text, names)
    cls = CodeMind if "python" in names else ToolMind
    return cls(task_text, has_vla, tools=tools, two_arms=two_arms)


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
    """Shared parse of the task card and the strategy's driver; subclasses say how a cell is carried out.

    `step(result)` takes the newest tool result the conversation holds and
    returns the next tool call (name, args, text).  After any cell whose
    output reports the task solved, the mind calls finish (the paper's
    agents end the episode themselves; the call is counted).
    """

    def __init__(self, task_text: str, has_vla: bool, tools: list[dict[str, Any]] | None = None,
                 two_arms: bool = False):
        self.instruction, self.objects = _parse_card(task_text)
        self.plan = parse_task(self.instruction, self.objects)
        self.goals = plan_subgoals(self.instruction, self.objects)
        self.has_vla = has_vla
        self.tools = tools if tools is not None else default_tools(has_vla)
        if two_arms:
            from agents.planners.scripted_bimanual import bimanual_flow

            self.flow = bimanual_flow(self)
        else:
            self.flow = composite_flow(self) if len(self.goals) > 1 else pick_place_flow(self)
        self._started = False
        self.result: str | None = None

    def _advance(self, output: str | None) -> Cell | Finish:
        """The strategy's next step, given the output of the cell just carried out."""
        if output is not None and parse_success_line(output):
            self.flow.close()
            return Finish("done", "The task is complete.")
        try:
            if not self._started:
                self._started = True
                return next(self.flow)
            return self.flow.send(output)
        except StopIteration:
            return Finish("stuck", "No further idea.")

    @staticmethod
    def _finish(item: Finish) -> tuple[str, dict[str, Any], str]:
        return "finish", {"status": item.status, "summary": item.summary}, ""

    def step(self, result: str | None) -> tuple[str, dict[str, Any], str]:
        raise NotImplementedError

    def close(self) -> None:
        """The episode is over (or a new one began)."""


class CodeMind(_Mind):
    """Code cells: each step of the strategy is one `python` call; its output decides the next."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._sent = False

    def step(self, result):
        self.result = result
        item = self._advance(result if self._sent else None)
        if isinstance(item, Finish):
            return self._finish(item)
        self._sent = True
        return "python", {"code": item.code}, item.intent


class ToolMind(_Mind):
    """Tool calling: the code mind's very cells, carried out one primitive per tool call (tool_proxy)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.namespace = new_namespace()
        self.cell: CellAsToolCalls | None = None
        self._intent = ""

    def step(self, result):
        self.result = result
        output = None
        while True:
            if self.cell is not None:
                event = self.cell.next_event(result)
                if event[0] == "call":
                    text, self._intent = self._intent, ""
                    return event[1], event[2], text
                self.cell, output = None, event[1]
            item = self._advance(output)
            if isinstance(item, Finish):
                return self._finish(item)
            self.cell, self._intent, result = CellAsToolCalls(item.code, self.tools, self.namespace), item.intent, None

    def close(self) -> None:
        if self.cell is not None:
            self.cell.abandon()
            self.cell = None


def default_tools(has_vla: bool) -> list[dict[str, Any]]:
    """The one-arm tool agent's tools (full ablation), for minds built without a conversation (tests)."""
    from robots.api_docs import tool_schemas

    return tool_schemas(("vla",) if has_vla else (), include_show=False)
