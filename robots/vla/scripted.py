"""A scripted STAND-IN for a learned VLA policy: instruction parser + closed-loop pick-and-place skill.

This is not a learned model.  It exists so the `vla` primitive works offline
(no GPU, no policy server) with the behaviour a planner has to cope with:
it understands short pick-and-place instructions, acts through the robot
with the cameras (never simulator poses), sometimes fails, and is judged by
the benchmark's own success check.  A user with a real policy plugs in
`robots.vla.openpi_policy.OpenPiPolicy` behind the same seam.

* Parsing: "pick up the X ... and place it on/in the Y", "put/place the X
  on/in/on top of the Y".  X and Y are matched word by word against the
  scene's object names (`akita_black_bowl_1` answers "black bowl"; a
  "drawer" is the cabinet).  Duplicates (two black bowls) are told apart by
  the qualifier and measured positions: "between the plate and the
  ramekin", "next to the ramekin", "on the cookie box", "from table center".
  Anything else comes back as ``stopped_reason="not understood: ..."`` with
  no step taken.
* Acting: `robots.skills` on the robot's primitive implementations without
  the recorder (`skills.direct`), so a trace shows the one `vla` row; at
  most `max_steps` env steps.
* Failing: with probability `failure_prob` the rollout fails the way a
  policy does physically: it opens the gripper a third of the way into the
  transport, or it grasps 6-8 cm off the object.  Whatever the simulator then
  says is the outcome.
* Luck: each call's draw comes from a generator keyed on the instance and
  the repeat -- a sha256 of (benchmark, task, seed, repeat) -- and the
  call's number in the episode, so a rerun fails identically, instances and
  repeats get independent luck, and (common random numbers, `vla_luck:
  common`) the tool and the code agent meet the same luck on their n-th VLA
  call: a success difference between them is the interface's, not the
  dice's.  `vla_luck: per_agent` adds the agent to the key (independent luck).
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from agents.errors import CellbenchError
from robots import skills
from robots.vla.base import RobotIO, VLAOutcome

#: episode.vla_luck: both agents of an instance share the stand-in's draws, or each has its own.
VLA_LUCK = ("common", "per_agent")

#: Words of an instruction that name no object.
STOP_WORDS = {"the", "a", "an", "of", "top", "it", "up", "both"}
#: What instructions call an object vs the words in its scene name.
SYNONYMS = {"drawer": "cabinet", "cupboard": "cabinet", "cookie": "cookies", "burner": "stove", "stovetop": "stove"}
#: Words that end an object's name and start a spatial qualifier ("the black bowl next to the plate").
QUALIFIERS = ("between", "next to", "near", "beside", "on top of", "on", "in", "inside", "at", "from", "under", "to the")

_PICK_PLACE = re.compile(
    r"^(?:pick(?:\s+up)?|take|grab|lift)\s+(?:the\s+)?(?P<obj>.+?)\s+and\s+(?:place|put|drop|set|move)\s+it\s+"
    r"(?:on top of|on|onto|in|into|inside)\s+(?P<tgt>.+)$"
)
_PUT = re.compile(
    r"^(?:put|place|move|set|drop)\s+(?:the\s+)?(?P<obj>.+?)\s+(?:on top of|on|onto|in|into|inside)\s+(?P<tgt>.+)$"
)
_UNSUPPORTED = re.compile(r"\b(both|open|close|turn|push|pull|and put|then)\b")


class NotUnderstood(ValueError):
    """The stand-in's parser found no pick-and-place it can carry out in this scene."""


@dataclasses.dataclass(frozen=True)
class ParsedInstruction:
    obj: str
    """Scene name of the object to pick."""
    target: str
    """Scene name of what to place it on or in."""


def _words(text: str) -> list[str]:
    out = []
    for w in re.findall(r"[a-z]+", text.lower()):
        w = SYNONYMS.get(w, w)
        if w not in STOP_WORDS:
            out.append(w)
    return out


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def _name_words(name: str) -> set[str]:
    return {_stem(SYNONYMS.get(w, w)) for w in name.lower().split("_") if not w.isdigit()}


def match_names(phrase: str, names: list[str]) -> list[str]:
    """Scene names best matching a noun phrase (all ties, in scene order); [] when under half its words match."""
    words = [_stem(w) for w in _words(phrase)]
    if not words:
        return []
    scored = []
    for n in names:
        nw = _name_words(n)
        hits = sum(w in nw for w in words)
        # Fewer unmatched name words breaks ties: "wine bottle" prefers wine_bottle_1 over wine_rack_1.
        scored.append((hits / len(words), -len(nw - set(words)), n))
    best = max(scored, key=lambda s: (s[0], s[1]))
    if best[0] < 0.5:
        return []
    return [n for frac, extra, n in scored if (frac, extra) == best[:2]]


def split_qualifier(phrase: str) -> tuple[str, str, str]:
    """'black bowl next to the plate' -> ('black bowl', 'next to', 'the plate'); no qualifier -> (phrase, '', '')."""
    p = " " + phrase.strip().lower() + " "
    cuts = [(p.find(f" {q} "), q) for q in QUALIFIERS if p.find(f" {q} ") > 0]
    if not cuts:
        return phrase.strip(), "", ""
    at, q = min(cuts, key=lambda c: (c[0], -len(c[1])))
    return p[:at].strip(), q, p[at + len(q) + 2 :].strip()


def parse(instruction: str, names: list[str], locate) -> ParsedInstruction:
    """Resolve an instruction to (object, target) scene names; raises NotUnderstood."""
    text = " ".join(instruction.lower().replace(",", " ").split()).rstrip(".")
    m = _PICK_PLACE.match(text) or (None if _UNSUPPORTED.search(text) else _PUT.match(text))
    if m is None:
        raise NotUnderstood(f"no pick-and-place in {instruction!r}")
    obj_head, qual, ref = split_qualifier(m.group("obj"))
    objs = match_names(obj_head, names)
    if not objs:
        raise NotUnderstood(f"no object in the scene matches {obj_head!r}")
    target = _resolve_target(m.group("tgt"), names)
    candidates = [o for o in objs if o != target] or objs
    obj = candidates[0] if len(candidates) == 1 else _disambiguate(candidates, qual, ref, names, locate)
    return ParsedInstruction(obj, target)


def _resolve_target(phrase: str, names: list[str]) -> str:
    phrase = re.sub(r"^(the\s+)?top\s+of\s+", "", phrase.strip())
    head, _, rest = split_qualifier(phrase)
    for candidate in (head, phrase, rest):
        found = match_names(candidate, names) if candidate else []
        if found:
            return found[0]
    # "the back compartment of the caddy": the container is named after "of".
    if " of " in phrase:
        found = match_names(phrase.rsplit(" of ", 1)[1], names)
        if found:
            return found[0]
    raise NotUnderstood(f"no target in the scene matches {phrase!r}")


def _disambiguate(candidates: list[str], qual: str, ref: str, names: list[str], locate) -> str:
    """Pick among same-named objects by the qualifier, using measured positions."""
    where = {c: locate(c) for c in candidates}
    seen = [c for c in candidates if where[c].found]
    if not seen:
        return candidates[0]
    pos = {c: np.asarray(where[c].position) for c in seen}
    if qual == "between":
        parts = [p for p in re.split(r"\s+and\s+", ref) if p]
        refs = [_ref_position(p, names, locate, exclude=candidates) for p in parts]
        refs = [r for r in refs if r is not None]
        if refs:
            mid = np.mean([r.position for r in refs], axis=0)
            return min(seen, key=lambda c: np.linalg.norm(pos[c][:2] - mid[:2]))
    elif qual in ("from", "at") and ("center" in ref or "centre" in ref):
        # The table's centre as the middle of everything the cameras see on it.
        located = [locate(n) for n in names]
        centre = np.mean([np.asarray(loc.position) for loc in located if loc.found], axis=0)
        return min(seen, key=lambda c: np.linalg.norm(pos[c][:2] - centre[:2]))
    elif qual:
        r = _ref_position(ref, names, locate, exclude=candidates)
        if r is not None:
            if qual in ("on", "on top of"):
                # Resting on the reference: above its top and inside its footprint.
                return min(seen, key=lambda c: np.linalg.norm(pos[c][:2] - np.asarray(r.position[:2]))
                           + (0.0 if where[c].top_z > r.top_z else 1.0))
            return min(seen, key=lambda c: np.linalg.norm(pos[c] - np.asarray(r.position)))
    return seen[0]


def _ref_position(phrase: str, names: list[str], locate, exclude=()):
    head, _, rest = split_qualifier(phrase)
    for cand in (head, rest):
        found = [n for n in match_names(cand, names) if n not in exclude] if cand else []
        if found:
            loc = locate(found[0])
            if loc.found:
                return loc
    return None


class _StepBudgetExceeded(Exception):
    pass


class _StepLimitedBackend:
    """The robot's backend with a hard cap on env steps (the policy's max_steps)."""

    def __init__(self, backend, limit: int):
        self._backend = backend
        self._left = limit

    def step(self, action, arm: str = "right"):
        if self._left <= 0:
            raise _StepBudgetExceeded
        self._left -= 1
        self._backend.step(action, arm)

    def __getattr__(self, name):
        return getattr(self._backend, name)


class _Misperceiving:
    """Primitives whose camera estimate of one object is off by `offset` (a misgrasp)."""

    def __init__(self, robot, name: str, offset: np.ndarray):
        self._robot, self._name, self._offset = robot, name, offset

    def locate(self, name):
        loc = self._robot.locate(name)
        if name != self._name or not loc.found:
            return loc
        return dataclasses.replace(loc, position=tuple(np.asarray(loc.position) + self._offset))

    def points(self, name):
        pts = self._robot.points(name)
        return pts + self._offset if name == self._name else pts

    def __getattr__(self, name):
        return getattr(self._robot, name)


def luck_key(benchmark: str, task: str, seed: int, repeat: int = 0, agent: str | None = None) -> list[int]:
    """Entropy of the stand-in's generator for one episode: four 32-bit words of a sha256 of the instance,
    the repeat and (per-agent luck only) the agent.

    sha256, not `hash()`: Python salts string hashes per process, and the
    draws must be the same in every process and on every machine.
    """
    parts = ["scripted-vla", str(benchmark), str(task), str(int(seed)), str(int(repeat))]
    if agent is not None:
        parts.append(str(agent))
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4)]


class ScriptedVLA:
    """Scripted stand-in for a VLA policy (see the module docstring); NOT a learned model."""

    name = "scripted-vla-standin"
    FAILURE_MODES = ("drop_in_transport", "offset_grasp")

    def __init__(self, failure_prob: float = 0.2, seed: int = 0, luck: Sequence[int] | None = None):
        """`luck`: the generator's entropy (`luck_key`); without it, the seed alone (a bare stand-in in a test)."""
        if not 0.0 <= failure_prob <= 1.0:
            raise ValueError(f"failure_prob must be in [0, 1], got {failure_prob}")
        self.failure_prob = float(failure_prob)
        self.seed = int(seed)
        self.luck = [int(w) for w in luck] if luck is not None else [self.seed]
        self.calls = 0

    @classmethod
    def from_spec(cls, spec: dict[str, Any]):
        """The stand-in of one episode from the runtime's init spec (benchmark, task, seed, repeat, agent,
        vla_failure_prob, vla_luck)."""
        mode = spec.get("vla_luck", "common")
        if mode not in VLA_LUCK:
            raise CellbenchError(f"episode.vla_luck: {mode!r} is not one of {', '.join(VLA_LUCK)}")
        agent = None
        if mode == "per_agent":
            agent = spec.get("agent")
            if agent is None:
                raise CellbenchError("episode.vla_luck: per_agent needs the episode's agent in the runtime's init spec")
        seed = int(spec.get("seed", 0))
        key = luck_key(spec.get("benchmark", ""), spec.get("task", ""), seed, int(spec.get("repeat", 0)), agent)
        return cls(failure_prob=float(spec.get("vla_failure_prob", 0.2)), seed=seed, luck=key)

    def draw(self, call_number: int) -> tuple[str | None, np.random.Generator]:
        """The luck of the episode's `call_number`-th VLA call: (failure mode or None, the generator the
        failure's details are drawn from next)."""
        rng = np.random.default_rng([*self.luck, int(call_number)])
        failure = str(rng.choice(self.FAILURE_MODES)) if rng.random() < self.failure_prob else None
        return failure, rng

    def run(self, io: RobotIO, instruction: str, max_steps: int) -> VLAOutcome:
        self.calls += 1
        robot = getattr(io, "robot", None)
        if robot is None:
            return VLAOutcome(0, io.success(), "error: the scripted stand-in needs a Robot-backed RobotIO (BackendIO)")
        failure, rng = self.draw(self.calls)
        prims = skills.direct(robot)
        try:
            plan = parse(instruction, list(robot.backend.segmentation_names().values()), prims.locate)
        except NotUnderstood as e:
            return VLAOutcome(0, io.success(), f"not understood: {e}")
        if io.success():
            return VLAOutcome(0, True, "success")

        steps0 = robot.backend.counter.sim_steps
        motion_backend = robot.motion.backend
        robot.motion.backend = _StepLimitedBackend(motion_backend, max_steps)
        try:
            self._act(prims, plan, failure, rng)
            reason = "success" if io.success() else "policy_done"
        except _StepBudgetExceeded:
            reason = "max_steps"
        finally:
            robot.motion.backend = motion_backend
        steps = robot.backend.counter.sim_steps - steps0
        success = io.success()
        return VLAOutcome(steps, success, "success" if success else reason)

    @staticmethod
    def _act(prims, plan: ParsedInstruction, failure: str | None, rng: np.random.Generator) -> None:
        if failure is None:
            skills.pick_and_place(prims, plan.obj, plan.target)
            return
        scene = skills.scan(prims)
        if plan.obj not in scene or plan.target not in scene:
            return
        if failure == "offset_grasp":
            # Perpendicular to the yaw-0 finger axis (world y), so the fingers close beside the object.
            offset = np.array([rng.choice([-1.0, 1.0]) * rng.uniform(0.06, 0.08), 0.0, 0.0])
            wrong = _Misperceiving(prims, plan.obj, offset)
            scene = {n: wrong.locate(n) if n == plan.obj else loc for n, loc in scene.items()}
            grasp = skills.grasp(wrong, plan.obj, scene)
            if grasp is not None:  # held it anyway: carry on as a policy would
                skills.place_on(prims, plan.target, scene[plan.obj].extent, grasp, scene, held_name=plan.obj)
            return
        # drop_in_transport: a sound grasp, then the fingers open a third of the way to the target.
        grasp = skills.grasp(prims, plan.obj, scene)
        if grasp is None:
            return
        start = np.asarray(prims.state().eef_pos)
        tgt = scene[plan.target].position
        goal = np.array([tgt[0] + grasp.offset_xy[0], tgt[1] + grasp.offset_xy[1]])
        carry = max(skills.clear_height(scene, start[:2], goal, grasp.hang_m, exclude=(plan.obj,)), start[2])
        prims.move_to([start[0], start[1], carry])
        drop = start[:2] + (goal - start[:2]) / 3
        prims.move_to([drop[0], drop[1], carry])
        prims.set_gripper("open")
