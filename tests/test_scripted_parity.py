"""The scripted planner is equally persistent in both interfaces, by construction.

Its strategy is written once (agents/planners/strategy.py); the code mind
sends it as cells and the tool mind runs the same cells one primitive per
tool call.  These tests drive both minds against one small world model that
answers the primitives the way the runtime does (the code agent through the
real cell namespace and the success guard, the tool agent through the real
tool-result texts of agents/feedback.py), in scenarios where the two used to
drift apart: a release that completes but the benchmark's check fails, a
grasp that slips, a VLA that fails and then succeeds, a primitive that raises.
The primitives each interface makes the world execute must be the same,
call for call; only how many LLM calls they take differs.
"""
from __future__ import annotations

import json

import pytest

from agents import feedback
from agents.cells import CellNamespace
from agents.planners.scripted import CodeMind, ToolMind
from robots.api_docs import tool_schemas
from robots.results import Gripper, Located, Move, RobotState, Shown, VLAResult, summarize
from robots.robot import EpisodeFinished

ACTING = {"move_to", "set_gripper", "release", "vla", "rotate_wrist", "move_both"}
BOXES = {"akita_black_bowl_1": ((-0.05, 0.20, 0.92), (0.12, 0.12, 0.05), 0.95),
         "plate_1": ((0.05, 0.05, 0.905), (0.17, 0.17, 0.02), 0.915),
         "cookies_1": ((0.20, -0.10, 0.93), (0.06, 0.10, 0.04), 0.95)}
CARD = ("Task: pick up the black bowl and place it on the plate\n"
        "Objects in the scene (names the tools accept): akita_black_bowl_1, plate_1, cookies_1")


class World:
    """A scene the primitives act on; `scenario` says how it fails.  Records every primitive it executes."""

    def __init__(self, scenario: str):
        self.scenario = scenario
        self.log: list[tuple[str, dict]] = []
        self.success = False
        self.closed = False
        self.eef = [0.0, 0.0, 1.1]
        self.vla_calls = 0

    def _rec(self, primitive, **args):
        self.log.append((primitive, args))

    def locate(self, name):
        self._rec("locate", name=name)
        (x, y, z), ext, top = BOXES[name]
        return Located(name, True, (x, y, z), ext, top, 1.0, 500)

    def state(self):
        self._rec("state")
        return RobotState(tuple(self.eef), 0.0, 0.02 if self.closed else 0.08, self._holding(), 0)

    def _holding(self):
        # A grasp that slips holds when the fingers close, and has let go by the carry.
        if self.scenario == "slips":
            return self.closed and self.eef[2] < 1.0
        return self.closed

    def set_gripper(self, action):
        self._rec("set_gripper", action=action)
        self.closed = action == "close"
        return Gripper(0.02 if self.closed else 0.08, self._holding(), 10)

    def move_to(self, xyz, max_steps=250):
        self._rec("move_to", xyz=[round(v, 4) for v in xyz])
        self.eef = list(xyz)
        if self.scenario == "raises" and len([n for n, _ in self.log if n == "move_to"]) == 2:
            raise RuntimeError("backend lost its render context")
        return Move(True, 0.001, 20)

    def release(self, lift_m=0.05):
        self._rec("release", lift_m=lift_m)
        self.closed = False
        return Gripper(0.08, False, 10)

    def vla(self, instruction, max_steps=400):
        self._rec("vla", instruction=instruction)
        self.vla_calls += 1
        if self.scenario == "vla_second" and self.vla_calls == 2:
            self.success = True
        return VLAResult("scripted", self.success, 120, "success" if self.success else "policy_done")

    def show(self, camera="agentview"):
        self._rec("show", camera=camera)
        return Shown(camera, 0)


class GuardedRobo:
    """The code agent's `robo`: the world behind the success guard, as the runtime's Robot is."""

    def __init__(self, world: World):
        self._world = world

    def __getattr__(self, name):
        fn = getattr(self._world, name)

        def call(*a, **kw):
            if name in ACTING and self._world.success:
                raise EpisodeFinished()
            self._world.acted = self._world.acted or name in ACTING
            return fn(*a, **kw)
        return call


def run_code(world: World, has_vla: bool, max_calls: int = 20) -> list[tuple[str, dict]]:
    """The code mind's cells in the real cell namespace; each output as the runtime composes it."""
    mind = CodeMind(CARD, has_vla=has_vla)
    ns = CellNamespace(GuardedRobo(world))
    calls, result = [], None
    for _ in range(max_calls):
        name, args, _ = mind.step(result)
        calls.append((name, args))
        if name == "finish":
            return calls
        world.acted = False
        out = ns.run(args["code"])
        result = feedback.cell_output(out.output, acted=world.acted, refused=out.finished, success=world.success)
    raise AssertionError("no finish")


def run_tool(world: World, has_vla: bool, max_calls: int = 80) -> list[tuple[str, dict]]:
    """The tool mind, each tool call answered with the runtime's own result text for it."""
    tools = tool_schemas(("vla",) if has_vla else (), include_show=False)
    mind = ToolMind(CARD, has_vla=has_vla, tools=tools)
    calls, result = [], None
    for _ in range(max_calls):
        name, args, _ = mind.step(result)
        calls.append((name, args))
        if name == "finish":
            mind.close()
            return calls
        acting = name in ACTING
        if acting and world.success:
            result = feedback.tool_result(None, acted=False, success=True, refused=True)
            continue
        try:
            payload = summarize(getattr(world, name)(**args))
        except Exception as e:  # noqa: BLE001 - as the runtime's call_tool does
            payload, acting = feedback.error_text(e), False
        state = summarize(RobotState(tuple(world.eef), 0.0, 0.0, world._holding(), 0)) if acting else None
        result = feedback.tool_result(payload, acted=acting, success=world.success, state=state)
    raise AssertionError("no finish")


def _both(scenario: str, has_vla: bool):
    code_world, tool_world = World(scenario), World(scenario)
    code_calls = run_code(code_world, has_vla)
    tool_calls = run_tool(tool_world, has_vla)
    # `show` is a tool only with images on demand: the full tool agent gets images after every move anyway.
    code_prims = [p for p in code_world.log if p[0] != "show"]
    return code_prims, tool_world.log, code_calls, tool_calls


def _grasps(log):
    return sum(1 for name, args in log if name == "set_gripper" and args["action"] == "close")


@pytest.mark.parametrize("scenario,grasps", [("check_fails", 2), ("slips", 3)])
def test_same_primitives_when_the_placement_does_not_solve_the_task(scenario, grasps):
    """'placed but the benchmark's check fails': one attempt in the pick-and-place cell (it stops at 'placed'),
    one in the retry cell, in both; 'grasp slips': both attempts of the cell and the retry, in both."""
    code_prims, tool_prims, code_calls, tool_calls = _both(scenario, has_vla=False)
    assert code_prims == tool_prims
    assert _grasps(code_prims) == _grasps(tool_prims) == grasps
    assert code_calls[-1] == tool_calls[-1] == ("finish", {"status": "stuck", "summary": "Placed the object but the task is not solved."})
    # What differs is the cost: one LLM call per primitive against one per cell.
    assert len(tool_calls) == len(tool_prims) + 1 and len(code_calls) == 4


def test_same_vla_tries_when_the_vla_fails_then_succeeds():
    code_prims, tool_prims, code_calls, tool_calls = _both("vla_second", has_vla=True)
    assert code_prims == tool_prims == [("vla", {"instruction": "pick up the black bowl and place it on the plate"})] * 2
    # Both read the success flag the interface reported and end the episode themselves.
    assert code_calls[-1][1]["status"] == tool_calls[-1][1]["status"] == "done"
    assert [n for n, _ in code_calls] == ["python", "finish"] and [n for n, _ in tool_calls] == ["vla", "vla", "finish"]


def test_same_primitives_when_the_vla_keeps_failing():
    """Two VLA tries, then the planner's own pick-and-place; the placement solves nothing here."""
    code_prims, tool_prims, _, _ = _both("check_fails", has_vla=True)
    assert code_prims == tool_prims
    assert [n for n, _ in code_prims[:2]] == ["vla", "vla"] and _grasps(code_prims) == 2


def test_an_exception_in_a_primitive_ends_the_step_the_same_way_in_both():
    """A RuntimeError from the backend: a traceback in the cell, an error result in the tool call; the
    strategy reads either as the step having failed and goes on identically."""
    code_prims, tool_prims, code_calls, tool_calls = _both("raises", has_vla=False)
    assert code_prims == tool_prims
    assert code_calls[-1][0] == tool_calls[-1][0] == "finish"


def test_tool_results_are_parsed_into_the_api_result_fields():
    """The tool mind's proxy gives the cell the documented field names (found, position, top_z, reached,
    holding, eef_pos), so one cell text runs in both interfaces."""
    from agents.planners.tool_proxy import CellAsToolCalls

    tools = tool_schemas((), include_show=False)
    cell = CellAsToolCalls("loc = robo.locate('plate_1')\nprint(loc.found, loc.position[2], loc.top_z)\n"
                           "m = robo.move_to([0.1, 0.2, 1.0])\nprint(m.reached)\n", tools, {})
    event = cell.next_event(None)
    assert event == ("call", "locate", {"name": "plate_1"})
    event = cell.next_event(json.dumps(summarize(Located("plate_1", True, (0.0, 0.0, 0.9), (0.1, 0.1, 0.02), 0.91, 1.0, 9))))
    assert event == ("call", "move_to", {"xyz": [0.1, 0.2, 1.0]})
    kind, output = cell.next_event(feedback.tool_result(summarize(Move(True, 0.0, 5)), acted=True, success=False, state={}))
    assert kind == "done"
    assert output.splitlines() == ["True 0.9 0.91", "True", feedback.success_line(False)]
