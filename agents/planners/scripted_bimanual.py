"""The scripted planner's two-arm strategies: lift a pot with both hands, hand a hammer from right to left.

Chosen by `agents.planners.scripted.ScriptedPlanner` when the interface it is
given is a two-arm robot's (a `move_both` tool, or `robo.move_both` in the API
reference) — what an LLM would see.  Like the rest of the scripted planner
it reads only the conversation: the instruction (which also says how the
arms stand), tool results, and cell output.

* Tool calling: one primitive per call.  The geometry between calls is
  `robots.bimanual_skills`' planning functions applied to the `locate` and
  `state` results parsed from the tool messages (what an LLM works out in
  its head).
* Code: a cell that defines those same planning functions and the two-arm
  procedures (their source, pasted — the namespace holds only `robo`, `np`
  and `math`), runs them with a local retry and prints what happened; one
  more cell retries if the task is not solved; then `finish`.

Both try the VLA first when it exists (twice, as for LIBERO-PRO).
"""
from __future__ import annotations

import inspect

from agents.planners.scripted import MAX_VLA_TRIES, ToolMind, _Mind
from robots import bimanual_skills as bs

#: Two-arm skills take 200-700 control steps (both arms approach in turn); the guide says so.
VLA_MAX_STEPS = 800
#: The two-arm tasks' objects, by skill.
LIFT_OBJECTS = ("pot_handle0", "pot_handle1")
HANDOVER_OBJECTS = ("hammer_handle", "hammer_head")


def is_two_arm_interface(system_text: str, tool_names: set[str]) -> bool:
    """The interface is a two-arm robot's: it offers move_both."""
    return "move_both" in tool_names or "robo.move_both(" in system_text


def skill_of(objects: list[str]) -> str | None:
    if all(o in objects for o in LIFT_OBJECTS):
        return "lift"
    if all(o in objects for o in HANDOVER_OBJECTS):
        return "handover"
    return None


#: Attempts of the two-arm procedure the code cells make: the driver cell's loop, then CELL_RETRY.
CODE_ATTEMPTS = 3


class BimanualToolMind(ToolMind):
    """Tool calling on a two-arm robot: one primitive per call, reacting to each JSON result."""

    def script(self):
        skill = skill_of(self.objects)
        if self.has_vla and skill:
            for _ in range(MAX_VLA_TRIES):
                yield "vla", {"instruction": self.instruction, "max_steps": VLA_MAX_STEPS}, \
                    "I will ask the VLA policy to do the two-arm task."
                if self._json().get("success"):
                    return
        if skill is None:
            yield "finish", {"status": "stuck", "summary": f"No two-arm strategy for: {self.instruction}"}, ""
            return
        layout = bs.layout_of(self.instruction)
        # Three attempts, as the code cells make (two in the driver cell, one in CELL_RETRY): the same
        # persistence in both interfaces; what differs is what an attempt costs.
        for attempt in range(CODE_ATTEMPTS):
            done = yield from (self._lift(layout) if skill == "lift" else self._handover(layout))
            if done is None:
                return
            # Not solved: let go with both hands, back off, and measure again.
            for arm in ("right", "left"):
                yield "release", {"lift_m": 0.1, "arm": arm}, f"Open the {arm} gripper and back off before retrying."
        yield "finish", {"status": "stuck", "summary": "Tried three times; the task is not solved."}, ""

    def _grasp(self, arm: str, xyz, yaw: float, what: str, open_first: bool = True):
        """Open, turn, come down from above, close; True when the fingers hold something."""
        x, y, z = xyz
        if open_first:
            yield "set_gripper", {"action": "open", "arm": arm}, f"Open the {arm} gripper."
        yield "rotate_wrist", {"yaw": yaw, "arm": arm}, "Turn the fingers across the bar."
        yield "move_to", {"xyz": [x, y, round(z + bs.APPROACH_ABOVE_M, 4)], "arm": arm}, f"Move the {arm} gripper above {what}."
        yield "move_to", {"xyz": [x, y, z], "arm": arm}, "Descend onto it."
        yield "set_gripper", {"action": "close", "arm": arm}, f"Close the {arm} gripper."
        return bool(self._json().get("holding"))

    def _locate(self, name: str):
        yield "locate", {"name": name}, f"Locate {name}."
        r = self._json()
        return r if r.get("found") else None

    def _lift(self, layout: str):
        """Both hands on the handles, then up together. Returns False to retry, None when it finished itself."""
        h0 = yield from self._locate("pot_handle0")
        h1 = yield from self._locate("pot_handle1")
        if not (h0 and h1):
            yield "finish", {"status": "stuck", "summary": "Cannot see both pot handles."}, ""
            return None
        plan = bs.lift_plan(h0, h1, layout)
        for arm in ("right", "left"):
            if not (yield from self._grasp(arm, plan["grasp"][arm], plan["yaw"], "its pot handle")):
                return False
        r, l = plan["grasp"]["right"], plan["grasp"]["left"]
        yield "move_both", {"right_xyz": [r[0], r[1], round(r[2] + bs.LIFT_M, 4)],
                            "left_xyz": [l[0], l[1], round(l[2] + bs.LIFT_M, 4)]}, "Lift with both arms together."
        return False

    def _state(self, arm: str):
        yield "state", {"arm": arm}, f"Check the {arm} arm."
        return self._json()

    def _handover(self, layout: str):
        """Pick up (unless held), turn, meet in the middle, left closes, right lets go."""
        right = yield from self._state("right")
        if right.get("holding"):
            yield "move_to", {"xyz": [bs.MEET_X[layout], bs.VIEW_Y, bs.CARRY_Z], "arm": "right"}, \
                "Bring the hammer to the middle where the cameras see it."
            right = yield from self._state("right")
        handle = yield from self._locate("hammer_handle")
        head = yield from self._locate("hammer_head")
        if not (handle and head):
            yield "finish", {"status": "stuck", "summary": "Cannot see the hammer."}, ""
            return None
        holding = bool(right.get("holding"))
        plan = bs.handover_plan(handle, head, layout, right.get("eef_yaw") if holding else None,
                                right.get("eef_pos") if holding else None)
        if not holding:
            if not (yield from self._grasp("right", plan["pick"], plan["pick_yaw"], "the hammer's handle")):
                return False
            right = yield from self._state("right")
            yield "move_to", {"xyz": [right["eef_pos"][0], right["eef_pos"][1], bs.CARRY_Z], "arm": "right"}, "Lift the hammer."
        yield "rotate_wrist", {"yaw": round(right["eef_yaw"] + plan["turn"], 4), "arm": "right"}, \
            "Turn the free part of the handle toward the left arm."
        yield "move_to", {"xyz": plan["meet_right"], "arm": "right"}, "Bring the hammer to the handover point."
        right = yield from self._state("right")
        if not right.get("holding"):
            return False
        handle = yield from self._locate("hammer_handle")
        head = yield from self._locate("hammer_head")
        if not (handle and head):
            return False
        grasp = bs.left_grasp(plan, right["eef_pos"], handle, head)
        if not (yield from self._grasp("left", grasp, plan["left_yaw"], "the handle next to the right hand", open_first=False)):
            return False
        yield "release", {"lift_m": 0.1, "arm": "right"}, "Let go with the right hand."
        return False


CELL_VLA = '''\
for attempt in range({tries}):
    r = robo.vla({instruction!r}, max_steps={max_steps})
    print("vla attempt", attempt + 1, "success:", r.success, "steps:", r.steps, "reason:", r.stopped_reason)
    if r.success:
        break
'''

CELL_DRIVER = '''
layout = {layout!r}  # from the task text: {layout_text}

def attempt():
    ok = {skill_fn}(robo, layout)
    r, l = robo.state("right"), robo.state("left")
    print("{skill} steps completed:", ok, "| right holding:", r.holding, "at", r.eef_pos,
          "| left holding:", l.holding, "at", l.eef_pos)
    return ok

for tries in range({driver_tries}):
    if attempt():
        break
    for arm in ("right", "left"):  # let go, back off, measure again
        robo.release(0.1, arm=arm)
'''

CELL_RETRY = '''\
for arm in ("right", "left"):
    robo.release(0.1, arm=arm)
print("retry:", attempt())
'''


def cell_library(skill: str) -> str:
    """The skill's planning functions and procedure, as source a cell can define."""
    proc = bs.lift_pot if skill == "lift" else bs.hand_over
    return bs.PLANNING_SOURCE[skill] + "\n\n" + inspect.getsource(bs._as_dict) + "\n\n" + inspect.getsource(proc)


class BimanualCodeMind(_Mind):
    """Code cells on a two-arm robot: the VLA with a local retry, then guarded two-arm procedures."""

    def script(self):
        skill = skill_of(self.objects)
        if self.has_vla and skill:
            yield "python", {"code": CELL_VLA.format(tries=MAX_VLA_TRIES, instruction=self.instruction, max_steps=VLA_MAX_STEPS)}, \
                "Try the VLA policy first, retrying locally."
            if "success: True" in (self.result or ""):
                return
        if skill is None:
            yield "finish", {"status": "stuck", "summary": f"No two-arm strategy for: {self.instruction}"}, ""
            return
        layout = bs.layout_of(self.instruction)
        code = cell_library(skill) + CELL_DRIVER.format(
            layout=layout, skill=skill, driver_tries=CODE_ATTEMPTS - 1, skill_fn="lift_pot" if skill == "lift" else "hand_over",
            layout_text="the arms face each other" if layout == "opposed" else "the arms stand side by side")
        yield "python", {"code": code}, "Define the two-arm planning helpers and run the task with checks and a retry."
        yield "python", {"code": CELL_RETRY}, "Not solved yet: let go, measure again and retry."
        yield "finish", {"status": "stuck", "summary": "Tried three times; the task is not solved."}, ""
