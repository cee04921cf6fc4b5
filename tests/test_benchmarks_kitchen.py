"""The kitchen groups (RoboCasa365 atomic / composite roles) on real LIBERO-90/10 scenes.

Fast checks first (no simulator): which tasks belong to which group (by the
number of BDDL goal predicates), the registry's families, budgets and guides,
the paper config's kitchen tasks, and how the scripted planner splits a
composite instruction.  Then one real episode per agent and group with the
scripted planner, `full` ablation, where the benchmark's own BDDL check
(`env.check_success()`, read back by the episode) decides success.  Seed 2
is an instance on which the scripted VLA stand-in draws no injected failure
in its first four calls, so these four episodes stay short (~4 minutes on
2 cores together); the no-VLA runs are `slow`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.config import load_config
from agents.errors import CellbenchError

REPO = Path(__file__).resolve().parents[1]
ATOMIC_TASK = "libero_90/46"  # pick up the alphabet soup and put it in the basket
COMPOSITE_TASK = "libero_10/0"  # put both the alphabet soup and the tomato sauce in the basket
SEED = 2
STATUSES = {"solved", "gave_up", "call_budget", "wall_clock", "context_overflow", "planner_error", "error"}


# ----------------------------------------------------------------- no simulator
def test_groups_are_split_by_the_number_of_bddl_goal_predicates():
    from robots.libero_pro import check_group, goal_predicates

    assert len(goal_predicates("libero_90", 20)) == 1  # turn on the stove
    assert len(goal_predicates("libero_90", 38)) == 2  # "put the right moka pot on the stove" also wants it on
    check_group("kitchen_atomic", "libero_90", 20)
    check_group("kitchen_atomic", "libero_10", 5)  # LIBERO-10's book task has a single goal
    check_group("kitchen_composite", "libero_90", 38)
    check_group("kitchen_composite", "libero_10", 0)
    check_group("libero_pro", "libero_spatial_swap", 0)
    with pytest.raises(CellbenchError, match="2 goal predicate"):
        check_group("kitchen_atomic", "libero_90", 38)
    with pytest.raises(CellbenchError, match="1 goal predicate"):
        check_group("kitchen_composite", "libero_10", 5)
    with pytest.raises(CellbenchError, match="draws from libero_90, libero_10"):
        check_group("kitchen_atomic", "libero_spatial_swap", 0)
    with pytest.raises(CellbenchError, match="tasks 0..89"):
        check_group("kitchen_atomic", "libero_90", 90)


def test_registry_lists_both_groups_with_family_budget_guides_and_coverage():
    from robots.guides import load_guide
    from robots.registry import HAS_GUIDES, all_tasks

    atomic = {t.task: t for t in all_tasks("kitchen_atomic")}
    composite = {t.task: t for t in all_tasks("kitchen_composite")}
    assert len(atomic) == 80 and len(composite) == 20 and not set(atomic) & set(composite)
    assert {t.call_budget for t in atomic.values()} == {40}
    assert {t.call_budget for t in composite.values()} == {100}
    assert all(t.guides for t in atomic.values()) and not any(t.guides for t in composite.values())
    for group in ("kitchen_atomic", "kitchen_composite"):
        assert HAS_GUIDES[group] == (load_guide(group) is not None)
    assert atomic["libero_90/20"].family == "turn_on" and not atomic["libero_90/20"].scripted
    assert atomic["libero_90/6"].family == "open"
    assert atomic["libero_90/2"].family == "place_inside"  # into the open drawer: not the cabinet's top
    assert atomic["libero_90/70"].family == "place_beside"
    assert atomic[ATOMIC_TASK].family == "pick_place" and atomic[ATOMIC_TASK].scripted
    assert composite[COMPOSITE_TASK].family == "pick_place+pick_place" and composite[COMPOSITE_TASK].scripted
    # The unsaid goal counts: "put both moka pots on the stove" also wants the stove on.
    assert composite["libero_10/8"].family == "pick_place+pick_place+turn_on" and not composite["libero_10/8"].scripted
    # The parsed BDDL sentence (what the task card shows), not task.language.
    assert atomic["libero_90/14"].instruction == "put the black bowl in the middle on the plate"


def test_paper_config_kitchen_tasks_belong_to_their_groups():
    from robots.libero_pro import check_group, parse_task_id

    config = load_config(REPO / "configs" / "paper.yaml")
    for group in ("kitchen_atomic", "kitchen_composite"):
        for task in config["benchmarks"][group]["tasks"]:
            check_group(group, *parse_task_id(task))
    assert len(config["benchmarks"]["kitchen_atomic"]["tasks"]) + len(config["benchmarks"]["kitchen_composite"]["tasks"]) == 50
    # RoboCasa365 composite has no operating guides: only the VLA ablation applies.
    assert config["benchmarks"]["kitchen_composite"]["ablations"] == ["full", "no_vla"]
    assert config["benchmarks"]["kitchen_composite"]["call_budget"] == 100


def test_scripted_planner_splits_composite_instructions():
    from agents.planners.scripted import plan_subgoals, split_subgoals

    assert split_subgoals("put both the alphabet soup and the tomato sauce in the basket") == [
        "put the alphabet soup in the basket", "put the tomato sauce in the basket"]
    assert split_subgoals("turn on the stove and put the moka pot on it") == [
        "turn on the stove", "put the moka pot on the stove"]
    assert split_subgoals("put the yellow and white mug in the microwave and close it") == [
        "put the yellow and white mug in the microwave", "close the microwave"]
    assert split_subgoals("put the white mug on the left plate and put the yellow and white mug on the right plate") == [
        "put the white mug on the left plate", "put the yellow and white mug on the right plate"]
    # "and place it" is the second half of one pick-and-place, not a second goal.
    assert split_subgoals("pick up the book and place it in the back compartment of the caddy") == [
        "pick up the book and place it in the back compartment of the caddy"]
    pots = plan_subgoals("put both moka pots on the stove", ["moka_pot_1", "moka_pot_2", "flat_stove_1"])
    assert [g.plan.candidates for g in pots] == [["moka_pot_1"], ["moka_pot_2"]]
    stove = plan_subgoals("turn on the stove and put the frying pan on it", ["chefmate_8_frypan_1", "flat_stove_1"])
    assert (stove[0].kind, stove[0].fixture, stove[0].understood) == ("turn_on", "flat_stove_1", False)


LIVING_ROOM_5 = ["porcelain_mug_1", "red_coffee_mug_1", "white_yellow_mug_1", "plate_1", "plate_2"]
#: A real `locate` on libero_90/66 seed 0: plate_1 is the left plate (BDDL plate_left_region), plate_2 the right.
LOCATED_5 = {"porcelain_mug_1": (-0.081, -0.146, 0.501), "red_coffee_mug_1": (-0.204, 0.008, 0.513),
             "white_yellow_mug_1": (-0.073, 0.086, 0.499), "plate_1": (0.018, -0.282, 0.450),
             "plate_2": (0.012, 0.309, 0.449)}


def test_scripted_grounding_knows_what_the_mugs_look_like():
    from agents.planners.scripted import ground, parse_task

    assert ground("white mug", LIVING_ROOM_5) == ["porcelain_mug_1"]
    assert ground("yellow and white mug", LIVING_ROOM_5) == ["white_yellow_mug_1"]
    assert ground("red mug", LIVING_ROOM_5) == ["red_coffee_mug_1"]
    # Same-named objects still tie; the spatial word or the located positions decide later.
    assert ground("black bowl", ["akita_black_bowl_1", "akita_black_bowl_2", "plate_1"]) == ["akita_black_bowl_1", "akita_black_bowl_2"]
    assert ground("frying pan", ["chefmate_8_frypan_1", "flat_stove_1"]) == ["chefmate_8_frypan_1"]
    assert ground("plate", LIVING_ROOM_5) == ["plate_1", "plate_2"]  # a tie left to the spatial choice
    plan = parse_task("put the yellow and white mug to the front of the white mug", LIVING_ROOM_5)
    # place_beside ("to the front of"): the mug goes on the table in front of the white mug.
    assert (plan.understood, plan.candidates, plan.relation, plan.beside, plan.target) == (
        True, ["white_yellow_mug_1"], "beside", "front", "porcelain_mug_1")


def test_scripted_spatial_target_is_chosen_from_located_positions():
    from agents.planners.scripted import choose_by_side, choose_target, parse_task

    right = parse_task("put the red mug on the right plate", LIVING_ROOM_5)
    assert (right.candidates, right.targets, right.target_side) == (["red_coffee_mug_1"], ["plate_1", "plate_2"], "right")
    assert choose_target(right, LOCATED_5) == "plate_2"
    left = parse_task("put the white mug on the left plate", LIVING_ROOM_5)
    assert left.candidates == ["porcelain_mug_1"] and choose_target(left, LOCATED_5) == "plate_1"
    # Only what was located counts; nothing located leaves the first.
    assert choose_target(right, {"plate_1": LOCATED_5["plate_1"]}) == "plate_1"
    assert choose_target(right, {}) == "plate_1"
    # A phrase without a side word keeps the first of the tie.
    assert parse_task("put the red mug on the plate", LIVING_ROOM_5).target_side is None
    # The convention: left -y, right +y, front +x (away from the robot), back -x, middle nearest the centre.
    pts = {"a": (0.10, 0.15), "b": (-0.05, 0.20), "c": (-0.15, 0.05)}  # KITCHEN_SCENE2's front/middle/back bowls
    assert [choose_by_side(pts, s) for s in ("front", "middle", "back", "left", "right")] == ["a", "b", "c", "c", "b"]


def test_scripted_spatial_object_words():
    from agents.planners.scripted import choose_candidate, parse_task

    bowls = ["akita_black_bowl_1", "akita_black_bowl_2", "akita_black_bowl_3", "plate_1", "wooden_cabinet_1"]
    at = {"akita_black_bowl_1": (0.10, 0.15), "akita_black_bowl_2": (-0.05, 0.20), "akita_black_bowl_3": (-0.15, 0.05)}
    middle = parse_task("put the black bowl in the middle on the plate", bowls)
    assert (middle.side, middle.relation, middle.target) == ("middle", "on", "plate_1")
    assert choose_candidate(middle, at) == "akita_black_bowl_2"
    assert choose_candidate(parse_task("put the black bowl at the back on the plate", bowls), at) == "akita_black_bowl_3"
    assert choose_candidate(parse_task("put the black bowl at the front on the plate", bowls), at) == "akita_black_bowl_1"
    tray = parse_task("pick up the black bowl on the left and put it in the tray",
                      ["akita_black_bowl_1", "akita_black_bowl_2", "wooden_tray_1"])
    assert tray.side == "left" and tray.target == "wooden_tray_1"
    assert choose_candidate(tray, {"akita_black_bowl_1": (-0.12, 0.05), "akita_black_bowl_2": (-0.09, -0.13)}) == "akita_black_bowl_2"
    # Two objects with a reference object still choose by distance, not by a side word.
    between = parse_task("pick up the black bowl between the plate and the ramekin and place it on the plate",
                         ["akita_black_bowl_1", "akita_black_bowl_2", "plate_1", "glazed_rim_porcelain_ramekin_1"])
    assert between.refs and between.side is None


class _Located:
    def __init__(self, name, xyz):
        self.name, self.found, self.position = name, True, tuple(xyz)
        self.top_z, self.extent = xyz[2] + 0.05, (0.08, 0.08, 0.1)


class _FakeRobo:
    """locate() from fixed positions, nothing else: enough for the scripted planner's choosing cells."""

    def __init__(self, at):
        self.at = at

    def locate(self, name):
        return _Located(name, self.at[name])


def test_scripted_cells_make_the_same_spatial_choice_in_python():
    import contextlib
    import io

    from agents.planners.scripted import locate_and_choose_cell, parse_task, plan_subgoals
    from agents.planners.strategy import choose_by_side, library

    at = dict(LOCATED_5)
    for instruction, obj, target in (("put the red mug on the right plate", "red_coffee_mug_1", "plate_2"),
                                     ("put the white mug on the left plate", "porcelain_mug_1", "plate_1")):
        env = {"robo": _FakeRobo(at)}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(locate_and_choose_cell(parse_task(instruction, LIVING_ROOM_5)), env)
        assert (env["obj"], env["target"]) == (obj, target), instruction
    # Mirror the scene: the cell decides from what it located, not from the names.
    mirrored = {n: (x, -y, z) for n, (x, y, z) in at.items()}
    env = {"robo": _FakeRobo(mirrored)}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(locate_and_choose_cell(parse_task("put the red mug on the right plate", LIVING_ROOM_5)), env)
    assert env["target"] == "plate_1"

    # The composite cell (libero_10/4), built as CodeMind builds it.
    from agents.planners.scripted import CodeMind

    card = ("Task: put the white mug on the left plate and put the yellow and white mug on the right plate\n"
            "Objects in the scene: " + ", ".join(LIVING_ROOM_5))
    mind = CodeMind(card, has_vla=False)
    name, args, _ = mind.step(None)
    assert name == "python" and args["code"].startswith(library(choose_by_side))
    env = {"robo": _FakeRobo(at)}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(args["code"], env)
    assert [(g["obj"], g["target"]) for g in env["goals"]] == [("porcelain_mug_1", "plate_1"),
                                                                 ("white_yellow_mug_1", "plate_2")]
    assert [g.plan.target_side for g in plan_subgoals(mind.instruction, LIVING_ROOM_5)] == ["left", "right"]


def test_scripted_tool_agent_carries_to_the_located_right_plate():
    import json as _json

    from agents.planners.scripted import ToolMind

    mind = ToolMind("Task: put the red mug on the right plate\nObjects in the scene: " + ", ".join(LIVING_ROOM_5), has_vla=False)
    result, moves = None, []
    for _ in range(30):
        name, args, _ = mind.step(result)
        if name == "locate":
            x, y, z = LOCATED_5[args["name"]]
            result = _json.dumps({"result": {"found": True, "position": [x, y, z], "extent": [0.08, 0.08, 0.1],
                                             "top_z": z + 0.05}})
        elif name == "set_gripper":
            result = _json.dumps({"result": {"holding": args["action"] == "close"}})
        elif name == "state":
            result = _json.dumps({"holding": True, "eef_pos": moves[-1] if moves else [0.0, 0.0, 1.0]})
        elif name == "move_to":
            moves.append(args["xyz"])
            result = _json.dumps({"result": {"reached": True}})
        elif name == "release":
            break
        else:
            result = "{}"
    # The carry goes over plate_2 (y = +0.309), the right plate.
    assert any(abs(m[1] - LOCATED_5["plate_2"][1]) < 1e-6 for m in moves), moves


def _drive_failing(mind, max_calls: int = 200, at=None) -> list[tuple[str, dict]]:
    """Run a ToolMind against a robot that sees everything and never holds anything; the calls it makes."""
    import json as _json

    at = at or LOCATED_5
    calls, result = [], None
    for _ in range(max_calls):
        name, args, _ = mind.step(result)
        calls.append((name, args))
        if name == "finish":
            return calls
        if name == "locate":
            x, y, z = at.get(args["name"], (0.0, 0.0, 0.9))
            result = _json.dumps({"result": {"found": True, "position": [x, y, z], "extent": [0.08, 0.08, 0.1],
                                             "top_z": z + 0.05}})
        elif name == "vla":
            result = _json.dumps({"result": {"success": False, "stopped_reason": "policy_done", "steps": 50}})
        else:
            result = _json.dumps({"result": {"holding": False, "reached": True}})
    raise AssertionError(f"no finish in {max_calls} calls")


def test_scripted_tool_agent_is_as_persistent_as_the_code_cells():
    """Same retries in both interfaces (the tool agent runs the code cells' text one primitive per call): a
    pick-and-place cell of MAX_PICK_TRIES tries and a retry cell of one; a composite's cells do every sub-goal,
    then one round over the unfinished ones with one VLA try each."""
    from agents.planners.scripted import MAX_PICK_TRIES, MAX_VLA_TRIES, ToolMind

    objects = "\nObjects in the scene: " + ", ".join(LIVING_ROOM_5)
    single = _drive_failing(ToolMind("Task: put the red mug on the right plate" + objects, has_vla=False))
    grasps = [a for n, a in single if n == "set_gripper" and a["action"] == "close"]
    assert len(grasps) == MAX_PICK_TRIES + 1
    composite = _drive_failing(ToolMind("Task: put the white mug on the left plate and put the yellow and white mug "
                                        "on the right plate" + objects, has_vla=True))
    vla = [a["instruction"] for n, a in composite if n == "vla"]
    assert len(vla) == MAX_VLA_TRIES + 1 and len(set(vla)) == 1  # the first sub-goal, then its retry
    grasps = [a for n, a in composite if n == "set_gripper" and a["action"] == "close"]
    assert len(grasps) == 2 * MAX_PICK_TRIES


def test_registry_covers_the_left_right_plate_tasks_by_start_positions():
    from agents.planners.scripted import plan_subgoals
    from robots.registry import _planner_agrees, all_tasks, start_positions
    from robots.libero_pro import parsed_problem

    atomic = {t.task: t for t in all_tasks("kitchen_atomic")}
    composite = {t.task: t for t in all_tasks("kitchen_composite")}
    for task in ("libero_90/65", "libero_90/66", "libero_90/67", "libero_90/68", "libero_90/12", "libero_90/14", "libero_90/60"):
        assert atomic[task].scripted, task
    assert composite["libero_10/4"].scripted
    problem = parsed_problem("libero_90", 66)
    start = start_positions(problem)
    assert start["plate_1"][1] < 0 < start["plate_2"][1]
    names = [n for g in (*problem["objects"].values(), *problem["fixtures"].values()) for n in g]
    goals = plan_subgoals("put the red mug on the right plate", names)
    pred = problem["goal_state"][0]
    assert _planner_agrees(pred, goals, names, start)
    # With the plates' places swapped, the run-time choice would take the other plate: not covered.
    swapped = dict(start, plate_1=start["plate_2"], plate_2=start["plate_1"])
    assert not _planner_agrees(pred, goals, names, swapped)


#: libero_90/37, /34, /76, /69 seed 0: a real `locate` (position, extent, top_z) of the object and the reference,
#: and the world position of the BDDL goal region's site (ranges half-width 0.05: the check's square).
BESIDE_SCENES = {
    "libero_90/37": ("put the white bowl to the right of the plate", "white_bowl_1", "plate_1",
                     ((-0.004, -0.273, 1.128), (0.079, 0.075, 0.029), 1.142),
                     ((-0.020, -0.019, 0.913), (0.111, 0.118, 0.010), 0.918), (0.0, 0.10)),
    "libero_90/34": ("put the yellow and white mug to the front of the white mug", "white_yellow_mug_1", "porcelain_mug_1",
                     ((0.000, -0.003, 0.964), (0.093, 0.109, 0.083), 1.005),
                     ((-0.084, -0.242, 0.965), (0.090, 0.105, 0.095), 1.012), (0.0, -0.25)),
    "libero_90/76": ("pick up the yellow and white mug and place it to the right of the caddy", "white_yellow_mug_1",
                     "desk_caddy_1", ((-0.113, -0.001, 0.948), (0.093, 0.113, 0.085), 0.990),
                     ((-0.387, -0.145, 0.977), (0.136, 0.408, 0.157), 1.055), (-0.40, 0.15)),
    "libero_90/69": ("put the chocolate pudding to the left of the plate", "chocolate_pudding_1", "plate_1",
                     ((-0.060, 0.110, 0.456), (0.076, 0.043, 0.022), 0.467),
                     ((0.169, 0.011, 0.450), (0.118, 0.119, 0.011), 0.455), (0.15, -0.10)),
}


def test_scripted_parses_place_beside_instructions():
    from agents.planners.scripted import parse_task

    objs = ["white_bowl_1", "plate_1", "desk_caddy_1", "white_yellow_mug_1", "red_coffee_mug_1", "microwave_1"]
    for text, obj, side, ref in (
            ("put the white bowl to the right of the plate", "white_bowl_1", "right", "plate_1"),
            ("put the white bowl to the left of the plate.", "white_bowl_1", "left", "plate_1"),
            ("pick up the yellow and white mug and place it to the right of the caddy", "white_yellow_mug_1", "right", "desk_caddy_1"),
            ("put the red mug to the back of the plate", "red_coffee_mug_1", "back", "plate_1"),
            ("put the red mug behind the plate", "red_coffee_mug_1", "back", "plate_1"),
            ("put the red mug in front of the plate", "red_coffee_mug_1", "front", "plate_1"),
            ("place the red mug on the left side of the caddy", "red_coffee_mug_1", "left", "desk_caddy_1"),
            ("put the white bowl next to the plate", "white_bowl_1", "next", "plate_1")):
        plan = parse_task(text, objs)
        assert (plan.understood, plan.candidates, plan.relation, plan.beside, plan.target) == (True, [obj], "beside", side, ref), text
    # "next to" that says which object (LIBERO-Spatial), not where to: pick-and-place as before.
    spatial = parse_task("pick up the black bowl next to the plate and place it on the red mug", objs + ["black_bowl_1"])
    assert (spatial.relation, spatial.qualifier, spatial.target) == ("on", "next to", "red_coffee_mug_1")
    assert parse_task("pick up the white bowl next to the plate", objs).relation != "beside"
    # A part of the caddy, not the table beside it: not a beside goal (and the registry leaves it uncovered).
    assert parse_task("pick up the red mug and place it to the right compartment of the caddy", objs).relation == "to"
    # Pick-and-place parses as before.
    on = parse_task("put the white bowl on the plate", objs)
    assert (on.relation, on.beside, on.target) == ("on", None, "plate_1")


def test_beside_spot_lands_in_the_bddl_goal_regions():
    from agents.planners.scripted import beside_placed, beside_spot

    for task, (_, _, _, (opos, oext, otop), (rpos, rext, rtop), region) in BESIDE_SCENES.items():
        side = {"37": "right", "34": "front", "76": "right", "69": "left"}[task.split("/")[1]]
        x, y, bottom = beside_spot(rpos, rext, rtop, opos, oext, otop, side)
        # Well inside the check's 5 cm: the object's centre is where it is set down, give or take.
        assert abs(x - region[0]) < 0.035 and abs(y - region[1]) < 0.035, (task, x, y)
        assert abs(bottom - (rtop - rext[2]) - 0.03) < 1e-9  # 3 cm above the reference's bottom (the table)
        at_spot = (x, y, opos[2])
        assert beside_placed(at_spot, oext, bottom - 0.03 + oext[2], rpos, rext, rtop, side)
        assert not beside_placed((x, y + 0.06, opos[2]), oext, bottom - 0.03 + oext[2], rpos, rext, rtop, side)
        assert not beside_placed(at_spot, oext, rtop + 0.1 + oext[2], rpos, rext, rtop, side)  # stacked on something
    # The sides: right +y, left -y, front +x, back -x; 'next' keeps the side the object is on.
    ref, ext = (0.0, 0.0, 0.9), (0.1, 0.1, 0.02)
    spots = {s: beside_spot(ref, ext, 0.92, (0.3, 0.1, 0.9), ext, 0.95, s)[:2] for s in ("right", "left", "front", "back", "next")}
    assert spots["right"][1] > 0 > spots["left"][1] and spots["front"][0] > 0 > spots["back"][0]
    assert spots["next"] == spots["front"]  # the object is further off in +x than in y
    assert all(abs(abs(v) - 0.12) < 1e-9 for s, xy in spots.items() for v in xy if v)


def test_bddl_beside_regions_follow_the_side_convention():
    """Every place_beside goal region lies on its named side of where its reference starts (right +y, left -y,
    front +x, back -x): the convention choose_by_side documents and beside_spot uses."""
    from robots.libero_pro import parsed_problem
    from robots.registry import all_tasks, beside_goal, start_positions

    tasks = [t for g in ("kitchen_atomic", "kitchen_composite") for t in all_tasks(g) if "place_beside" in t.family]
    assert len(tasks) == 8
    for t in tasks:
        suite, index = t.task.split("/")
        problem = parsed_problem(suite, int(index))
        names = [n for g in (*problem["objects"].values(), *problem["fixtures"].values()) for n in g]
        start = start_positions(problem)
        for pred in problem["goal_state"]:
            goal = beside_goal(pred[2], names)
            if goal is None:
                continue
            (ref,), side = goal
            x0, y0, x1, y1 = problem["regions"][pred[2]]["ranges"][0]
            dx, dy = (x0 + x1) / 2 - start[ref][0], (y0 + y1) / 2 - start[ref][1]
            along, across = (dy, dx) if side in ("left", "right") else (dx, dy)
            assert along * (1 if side in ("right", "front") else -1) > 0.08 and abs(across) < 0.03, (t.task, dx, dy)


def test_registry_covers_the_place_beside_tasks_the_planner_can_do():
    from robots.registry import all_tasks, beside_goal

    atomic = {t.task: t for t in all_tasks("kitchen_atomic")}
    composite = {t.task: t for t in all_tasks("kitchen_composite")}
    for task in ("libero_90/34", "libero_90/37", "libero_90/69", "libero_90/70", "libero_90/76"):
        assert atomic[task].family == "place_beside" and atomic[task].scripted, task
    assert composite["libero_10/6"].family == "pick_place+place_beside" and composite["libero_10/6"].scripted
    # "to the right compartment of the caddy", checked as the table right of the caddy: the sentence and the
    # goal disagree, and the planner follows the sentence.
    assert not atomic["libero_90/84"].scripted and not atomic["libero_90/85"].scripted
    assert beside_goal("kitchen_table_porcelain_mug_front_region", ["porcelain_mug_1", "white_yellow_mug_1"]) == (
        ["porcelain_mug_1"], "front")
    assert beside_goal("study_table_red_coffee_mug_behind_region", ["red_coffee_mug_1"]) == (["red_coffee_mug_1"], "back")
    assert beside_goal("wooden_cabinet_1_top_region", ["wooden_cabinet_1"]) is None


def _beside_card(task: str) -> tuple[str, dict]:
    text, obj, ref, o, r, _ = BESIDE_SCENES[task]
    return f"Task: {text}\nObjects in the scene: {obj}, {ref}, microwave_1", {obj: o, ref: r}


def _drive_holding(mind, scene) -> list[list[float]]:
    """Drive a ToolMind against fixed boxes (position, extent, top_z) and a grasp that holds; its moves up to
    the first release."""
    import json as _json

    result, moves = None, []
    for _ in range(40):
        name, args, _ = mind.step(result)
        if name == "locate":
            p, ext, top = scene[args["name"]]
            result = _json.dumps({"result": {"found": True, "position": list(p), "extent": list(ext), "top_z": top}})
        elif name == "release":
            return moves
        elif name == "state":
            result = _json.dumps({"holding": True, "eef_pos": moves[-1] if moves else [0.0, 0.0, 1.0]})
        else:
            moves += [args["xyz"]] if name == "move_to" else []
            result = _json.dumps({"result": {"holding": True, "reached": True}})
    raise AssertionError("no release")


def test_scripted_tool_agent_sets_the_object_down_beside_the_reference():
    from agents.planners.scripted import ToolMind, beside_spot

    card, scene = _beside_card("libero_90/37")
    moves = _drive_holding(ToolMind(card, has_vla=False), scene)
    (opos, oext, otop), (rpos, rext, rtop) = scene["white_bowl_1"], scene["plate_1"]
    x, y, bottom = beside_spot(rpos, rext, rtop, opos, oext, otop, "right")
    dy = oext[1] / 2 - 0.012  # the bowl is pinched by its rim wall, off its centre
    grasp_z = otop - 0.02
    assert moves[-1] == pytest.approx([x, y + dy, bottom + grasp_z - (otop - oext[2])])
    assert moves[-2][:2] == pytest.approx([x, y + dy]) and moves[-2][2] > otop  # carried high, then lowered
    assert 0.05 < y < 0.15  # right of the plate (+y), inside the BDDL region's y range


def _exec_cells(mind, robo, max_cells: int = 10) -> list[str]:
    """Run a CodeMind's cells against a fake robot; the cells' output, until it finishes."""
    import contextlib
    import io

    env, result, outs = {"robo": robo}, None, []
    for _ in range(max_cells):
        name, args, _ = mind.step(result)
        if name != "python":
            return outs
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(args["code"], env)
        result = buf.getvalue()
        outs.append(result)
    raise AssertionError("no finish")


class _FakeArm(_FakeRobo):
    """A fake robot for the cells: locate() from fixed boxes; records moves; holds when `holds`."""

    def __init__(self, boxes, holds=True):
        super().__init__({})
        self.boxes, self.holds, self.moves, self.closes = boxes, holds, [], 0

    def locate(self, name):
        (x, y, z), ext, top = self.boxes[name]
        loc = _Located(name, (x, y, z))
        loc.extent, loc.top_z = ext, top
        return loc

    def set_gripper(self, action):
        self.closes += action == "close"
        return type("G", (), {"holding": action == "close" and self.holds})()

    def move_to(self, xyz):
        self.moves.append(list(xyz))
        return type("M", (), {"reached": True})()

    def state(self):
        at = next((m for m in reversed(self.moves) if m != "release"), [0.0, 0.0, 1.0])
        return type("S", (), {"holding": self.holds, "eef_pos": tuple(at)})()

    def release(self, lift_m):
        self.moves.append("release")

    def show(self, camera):
        pass

    def vla(self, instruction):
        return type("V", (), {"success": False, "steps": 50, "stopped_reason": "policy_done"})()


def test_scripted_code_cells_set_the_object_down_where_the_tool_agent_does():
    from agents.planners.scripted import CodeMind, ToolMind

    for task in BESIDE_SCENES:
        card, scene = _beside_card(task)
        arm = _FakeArm(scene)
        outs = _exec_cells(CodeMind(card, has_vla=False), arm)
        assert "attempt 1 : placed" in outs[1], outs
        release = arm.moves[arm.moves.index("release") - 1]
        assert release == pytest.approx(_drive_holding(ToolMind(card, has_vla=False), scene)[-1]), task


def test_scripted_place_beside_is_as_persistent_in_both_interfaces():
    """The same attempts: MAX_PICK_TRIES in the first cell and one in the retry cell (CELL_RETRY), or as many
    grasps one primitive per call; a composite's beside sub-goal is retried as RETRY_GOALS does, in both."""
    from agents.planners.scripted import MAX_PICK_TRIES, MAX_VLA_TRIES, CodeMind, ToolMind

    card, scene = _beside_card("libero_90/34")
    arm = _FakeArm(scene, holds=False)
    _exec_cells(CodeMind(card, has_vla=False), arm)
    tool = _drive_failing(ToolMind(card, has_vla=False), at={n: p for n, (p, _, _) in scene.items()})
    assert arm.closes == len([a for n, a in tool if n == "set_gripper" and a["action"] == "close"]) == MAX_PICK_TRIES + 1

    # libero_10/6: the VLA puts the mug on the plate (a fresh look says so); the pudding is never grasped.
    living = {"porcelain_mug_1": ((0.15, 0.0, 0.50), (0.09, 0.10, 0.09), 0.55),
              "plate_1": ((0.15, 0.0, 0.45), (0.118, 0.119, 0.011), 0.455),
              "chocolate_pudding_1": ((-0.05, 0.1, 0.455), (0.076, 0.043, 0.022), 0.467),
              "red_coffee_mug_1": ((-0.2, 0.0, 0.46), (0.09, 0.10, 0.09), 0.5)}
    card = ("Task: put the white mug on the plate and put the chocolate pudding to the right of the plate\n"
            "Objects in the scene: " + ", ".join(living))
    arm = _FakeArm(living, holds=False)
    outs = _exec_cells(CodeMind(card, has_vla=True), arm)
    assert "white mug on the plate -> done by the vla" in outs[1], outs
    assert "retry: put the chocolate pudding to the right of the plate -> failed" in outs[2], outs
    tool = _drive_failing(ToolMind(card, has_vla=True), at={n: p for n, (p, _, _) in living.items()})
    vla = [a["instruction"] for n, a in tool if n == "vla"]
    assert vla == ["put the white mug on the plate"] + ["put the chocolate pudding to the right of the plate"] * (MAX_VLA_TRIES + 1)
    grasps = [a for n, a in tool if n == "set_gripper" and a["action"] == "close"]
    assert arm.closes == len(grasps) == 2 * MAX_PICK_TRIES


def _mug_points(centre, radius=0.04, height=0.09, handle=0.025, n=4000, seed=0):
    """A synthetic mug's surface points: an open cylinder (wall and rim) plus a handle loop on its +y side."""
    rng = np.random.default_rng(seed)
    a, z = rng.uniform(0, 2 * np.pi, n), rng.uniform(0, height, n)
    body = np.stack([radius * np.cos(a), radius * np.sin(a), z], axis=1)
    b = rng.uniform(-np.pi / 2, np.pi / 2, n // 4)
    loop = np.stack([np.zeros_like(b), radius + handle * np.cos(b), height / 2 + 0.03 * np.sin(b)], axis=1)
    return np.concatenate([body, loop]) + np.asarray(centre)


def test_aim_held_carries_the_object_not_the_gripper_over_the_target():
    """A mug pinched by one wall hangs off the gripper; aim_held, given its located box centre (as `locate`
    measures it) and the gripper's position, puts that centre over the target; an object held as grasped, or
    a bowl pinched by its rim as planned, keeps the plain spot."""
    from agents.planners.scripted import aim_held, pick_place_cell
    from agents.planners.strategy import library
    from robots.perception import summarize_points

    target = (0.0, 0.30)
    for hang in ((0.0, -0.045), (-0.013, -0.050), (0.04, 0.0), (0.02, 0.03)):  # pinched wall -> body offset
        eef = np.array([0.1, -0.1, 0.70])
        pts = _mug_points(eef + np.array([hang[0], hang[1], -0.10]))
        centre, _, _ = summarize_points(pts)
        px, py = aim_held(target[0], target[1], 0.0, centre, eef)
        # Lowered straight down from (px, py), the mug's box centre ends over the target.
        landed = (px + centre[0] - eef[0], py + centre[1] - eef[1])
        assert landed == pytest.approx(target, abs=0.005), hang
        assert (px, py) != pytest.approx(target, abs=0.01)
    # Held at the grasp (a can, a box): the spot is kept, within the locate's ~1 cm noise too.
    assert aim_held(0.0, 0.30, 0.0, (0.108, -0.095, 0.6), (0.1, -0.1, 0.7)) == (0.0, 0.30)
    # A bowl pinched by its rim as planned (centre dy behind the gripper in y): the planned spot is kept.
    assert aim_held(0.0, 0.35, 0.05, (0.1, -0.15, 0.6), (0.1, -0.1, 0.7)) == (0.0, 0.35)
    # A bowl that slipped 3 cm along its rim: corrected from the plain target (0, 0.30).
    px, py = aim_held(0.0, 0.35, 0.05, (0.13, -0.15, 0.6), (0.1, -0.1, 0.7))
    assert (px + 0.03, py - 0.05) == pytest.approx((0.0, 0.30))
    # A look far off the gripper (another object, a bad mask) is not trusted.
    assert aim_held(0.0, 0.30, 0.0, (0.3, -0.1, 0.6), (0.1, -0.1, 0.7)) == (0.0, 0.30)
    # The cells carry the same source.
    assert library(aim_held) in pick_place_cell()


def test_scripted_minds_both_look_at_the_held_object_before_carrying():
    """The tool agent and the code cells aim the same way: a mug hanging 5 cm off the gripper is carried
    5 cm the other way, in both."""
    import json as _json

    from agents.planners.scripted import CodeMind, ToolMind

    scene = {"porcelain_mug_1": ((-0.09, -0.16, 0.50), (0.09, 0.105, 0.0975), 0.549),
             "plate_1": ((-0.01, 0.30, 0.45), (0.108, 0.106, 0.011), 0.456)}
    card = "Task: put the white mug on the plate\nObjects in the scene: " + ", ".join(scene)
    hang = (-0.013, -0.050)

    class Hanging(_FakeArm):
        def locate(self, name):
            loc = super().locate(name)
            if name == "porcelain_mug_1" and self.closes:  # held: it hangs off the gripper
                at = self.state().eef_pos
                loc.position = (at[0] + hang[0], at[1] + hang[1], at[2] - 0.1)
            return loc

    arm = Hanging(scene)
    _exec_cells(CodeMind(card, has_vla=False), arm)
    code_release = arm.moves[arm.moves.index("release") - 1]

    mind, result, moves, eef, closed = ToolMind(card, has_vla=False), None, [], [0.0, 0.0, 1.0], False
    for _ in range(40):
        name, args, _ = mind.step(result)
        if name == "locate":
            p, ext, top = scene[args["name"]]
            if closed and args["name"] == "porcelain_mug_1":
                p = (eef[0] + hang[0], eef[1] + hang[1], eef[2] - 0.1)
            result = _json.dumps({"result": {"found": True, "position": list(p), "extent": list(ext), "top_z": top}})
        elif name == "release":
            break
        else:
            if name == "move_to":
                moves.append(args["xyz"])
                eef = args["xyz"]
            closed = closed or (name == "set_gripper" and args["action"] == "close")
            result = _json.dumps({"result": {"holding": True, "reached": True, "eef_pos": list(eef)}})
    assert moves[-1] == pytest.approx(code_release)
    assert moves[-1][:2] == pytest.approx([-0.01 - hang[0], 0.30 - hang[1]])


# --------------------------------------------------------------- real episodes
def _run(tmp_path_factory, benchmark: str, task: str, agent: str, ablation: str = "full", budget: int = 40):
    from agents.episode import EpisodeSpec, run_episode
    from agents.planners.scripted import ScriptedPlanner

    out = tmp_path_factory.mktemp(f"{benchmark}_{agent}_{ablation}")
    spec = EpisodeSpec(benchmark=benchmark, task=task, seed=SEED, agent=agent, ablation=ablation,
                       call_budget=budget, wall_clock_s=600)
    return run_episode(spec, ScriptedPlanner(), str(out)), out


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    # The composite runs without the VLA: its stand-in's luck on this instance leaves the sauce against the
    # basket (a blocked descent, four missed grasps), an honest failure the test should not hinge on; without
    # it the episode is deterministic and within the scripted planner's coverage.
    runs = {}
    for benchmark, task, budget, ablation in (("kitchen_atomic", ATOMIC_TASK, 40, "full"),
                                              ("kitchen_composite", COMPOSITE_TASK, 100, "no_vla")):
        for agent in ("code", "tool"):
            runs[benchmark, agent] = _run(tmp_path_factory, benchmark, task, agent, ablation, budget=budget)
    return runs


@pytest.mark.parametrize("benchmark", ["kitchen_atomic", "kitchen_composite"])
def test_one_real_episode_per_agent_and_the_code_agent_solves_it(episodes, benchmark):
    from agents.schema import validate_trace

    for agent in ("code", "tool"):
        rec, out = episodes[benchmark, agent]
        assert validate_trace(out) == [], (benchmark, agent)
        assert rec.benchmark == benchmark and rec.status in STATUSES
        assert rec.success == (rec.status == "solved"), rec
        # The success flag in the trace is the BDDL check the runtime read at the end.
        assert json.loads((out / "episode.json").read_text())["success"] == rec.success
    code, _ = episodes[benchmark, "code"]
    assert code.success and code.status == "solved", code


def test_guides_reach_atomic_prompts_and_not_composite_ones(episodes):
    for (benchmark, agent), (rec, out) in episodes.items():
        system = json.loads((out / "transcript.json").read_text())[0]["content"]
        assert ("# Operating guide" in system) == (benchmark == "kitchen_atomic"), (benchmark, agent)


def test_composite_code_agent_does_the_sub_goals_in_fewer_calls(episodes):
    code, _ = episodes["kitchen_composite", "code"]
    tool, _ = episodes["kitchen_composite", "tool"]
    assert code.n_calls <= tool.n_calls, (code.n_calls, tool.n_calls)


@pytest.mark.slow
@pytest.mark.parametrize("benchmark,task,budget", [("kitchen_atomic", ATOMIC_TASK, 40)])
def test_code_agent_without_vla(tmp_path_factory, benchmark, task, budget):
    # The planner's own primitives, no VLA: deterministic for a seed, and within its coverage.
    rec, _ = _run(tmp_path_factory, benchmark, task, "code", ablation="no_vla", budget=budget)
    assert rec.success and rec.status == "solved", rec
