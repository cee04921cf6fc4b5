"""The scripted planner's two-arm strategies: lift a pot with both hands, hand a hammer from right to left.

Chosen by `agents.planners.scripted.ScriptedPlanner` when the interface it is
given is a two-arm robot's (a `move_both` tool, or `robo.move_both` in the API
reference) — what an LLM would see.  Like the rest of the scripted planner
it reads only the conversation: the instruction (which also says how the
arms stand), tool results, and cell output.

The strategy is `robots.bimanual_skills`' planning functions and two-arm
procedures, pasted as source into cells (the namespace holds only `robo`,
`np` and `math`): a driver cell runs the procedure with a local retry and
prints what happened, one more cell retries if the task is not solved, then
`finish`.  The code mind sends those cells; the tool mind runs the same
cells one primitive per tool call (`agents.planners.tool_proxy`), so both
make the same attempts.  Both try the VLA first when it exists (twice, as
for LIBERO-PRO).
"""
from __future__ import annotations

import inspect

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


#: Attempts of the two-arm procedure: the driver cell's loop (all but one), then RETRY_CELL.
ATTEMPTS = 3

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

RETRY_CELL = '''\
for arm in ("right", "left"):
    robo.release(0.1, arm=arm)
print("retry:", attempt())
'''


def cell_library(skill: str) -> str:
    """The skill's planning functions and procedure, as source a cell can define."""
    proc = bs.lift_pot if skill == "lift" else bs.hand_over
    return bs.PLANNING_SOURCE[skill] + "\n\n" + inspect.getsource(bs._as_dict) + "\n\n" + inspect.getsource(proc)


def driver_cell(skill: str, layout: str) -> str:
    return cell_library(skill) + CELL_DRIVER.format(
        layout=layout, skill=skill, driver_tries=ATTEMPTS - 1, skill_fn="lift_pot" if skill == "lift" else "hand_over",
        layout_text="the arms face each other" if layout == "opposed" else "the arms stand side by side")


def bimanual_flow(mind):
    """The VLA with a local retry, then the guarded two-arm procedure with a local retry, then one more try."""
    from agents.planners.scripted import Cell, Finish, vla_cell

    skill = skill_of(mind.objects)
    if mind.has_vla and skill:
        yield Cell(vla_cell(mind.instruction, max_steps=VLA_MAX_STEPS), "Try the VLA policy first, retrying locally.")
    if skill is None:
        yield Finish("stuck", f"No two-arm strategy for: {mind.instruction}")
        return
    yield Cell(driver_cell(skill, bs.layout_of(mind.instruction)),
               "Define the two-arm planning helpers and run the task with checks and a retry.")
    yield Cell(RETRY_CELL, "Not solved yet: let go, measure again and retry.")
    yield Finish("stuck", "Tried three times; the task is not solved.")
