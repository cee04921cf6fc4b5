"""The scripted planner's one-arm strategy, written once as plain Python over a `robo`-shaped API.

Every function here is cell material: the code mind pastes their own source
(`library(...)`) and short calls of them into code cells; the tool mind runs
exactly the same cell text against a proxy `robo` whose every primitive is one
tool call (`agents.planners.tool_proxy`).  So both interfaces make the same
attempts, retries and checks by construction; only what they cost differs.

Rules for what lives here, because the source travels into cells: each
function uses only its arguments, `robo`'s documented primitives, `print`,
`math` and the other functions of this module (paste them together); no
imports, no module state.  Goals are plain dicts (`goal_dict` in
`agents.planners.scripted` builds them from a parsed instruction).
"""
from __future__ import annotations

import inspect


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
# "middle" is the one nearest the group's centre.
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


def dist2(a, b):
    """Squared distance in the table's plane."""
    return (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2


def locate_all(robo, names):
    """Locate every name once, printing what was found; {name: Located} of those seen."""
    seen = {}
    for name in dict.fromkeys(names):
        loc = robo.locate(name)
        if loc.found:
            seen[name] = loc
            print(name, "at", [round(v, 3) for v in loc.position], "top", round(loc.top_z, 3))
        else:
            print(name, "not found")
    return seen


def choose_object(goal, seen):
    """The object a goal means among same-named candidates: by distance to its references, else by its side word."""
    found = [c for c in goal["candidates"] if c in seen]
    refs = [seen[r].position for r in goal["refs"] if r in seen]
    if len(found) > 1 and refs:
        if goal["between"] and len(refs) >= 2:
            anchor = [(refs[0][0] + refs[1][0]) / 2, (refs[0][1] + refs[1][1]) / 2]
            return min(found, key=lambda c: dist2(seen[c].position, anchor))
        return min(found, key=lambda c: min(dist2(seen[c].position, r) for r in refs))
    if len(found) > 1 and goal["side"]:
        return choose_by_side({c: seen[c].position for c in found}, goal["side"])
    return found[0] if found else None


def choose_target(goal, seen):
    """The target among equally named ones, by the target phrase's side word ('the right plate')."""
    found = [t for t in goal["targets"] if t in seen]
    if len(found) > 1 and goal["target_side"]:
        return choose_by_side({t: seen[t].position for t in found}, goal["target_side"])
    return found[0] if found else goal["target"]


# LIBERO checks "on" a plate (an object target) as On(obj, plate): the object's body origin within 3 cm of the
# plate's in x-y, touching it and not below it.  A mug is hollow and about as wide as the open gripper (7.8 cm):
# a grasp at the centre of its box lands the fingers on its rim and pinches one wall, so it hangs off the
# gripper.  On libero_10/4 (seed 0) the white mug hung 5.2 cm from the gripper (1.3 cm in x, 5.0 in y) and,
# carried with the gripper over the plate's centre, came to rest 4.6 cm from it: not "on" it, though the
# plate's box holds it.  The box centre itself is not the problem: before the grasp it is 0.2-0.5 cm from
# each mug's body origin (the handle included; the rim's centre is 1.7 cm away).  So after lifting, a fresh
# look at the held object and the gripper says how it really hangs, and the carry aims the object.
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


def pick_and_place(robo, obj, target, relation):
    """Guarded pick-and-place from fresh measurements; returns a short report ('placed' when released).

    `relation` is 'on' / 'in' / ..., or 'beside <side>' to set the object on the table beside `target`.
    Bowls and ramekins are pinched by the rim wall (wider than the open gripper).
    """
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
    if relation.startswith("beside"):  # on the table beside the reference, the object's bottom just above it
        px, py, bottom = beside_spot(t.position, t.extent, t.top_z, o.position, o.extent, o.top_z, relation.split()[-1])
        py += dy
        release_z = bottom + gz - (o.top_z - ez)
    else:  # above the target's top (a container's rim), never inside it
        px, py = t.position[0], t.position[1] + dy
        release_z = t.top_z + max(0.04, ez * 0.6) + (0.03 if relation in ("in", "into", "inside") else 0.0)
    if held.found:  # carry the object, not the gripper, over the spot: a mug pinched by one wall hangs off-centre
        px, py = aim_held(px, py, dy, held.position, eef)
    robo.move_to([px, py, lift])
    if not robo.state().holding:
        return "dropped while carrying"
    robo.move_to([px, py, release_z])
    robo.release(0.08)
    return "placed"


def placed(robo, obj, target, relation):
    """A fresh look: does obj rest on/in (or beside) target? Unseen after a drop into a container counts as inside
    (baskets and drawers hide what lies in them from the scene cameras)."""
    o, t = robo.locate(obj), robo.locate(target)
    if not t.found:
        return False
    if not o.found:
        return relation in ("in", "into", "inside")
    if relation.startswith("beside"):
        return beside_placed(o.position, o.extent, o.top_z, t.position, t.extent, t.top_z, relation.split()[-1])
    near = abs(o.position[0] - t.position[0]) <= t.extent[0] / 2 + 0.02 and abs(o.position[1] - t.position[1]) <= t.extent[1] / 2 + 0.02
    return near and o.top_z > t.top_z - t.extent[2] + 0.01


def try_vla(robo, instruction, tries, **options):
    """Ask the VLA policy up to `tries` times, stopping at its first success; the last result."""
    r = None
    for attempt in range(tries):
        r = robo.vla(instruction, **options)
        print("vla attempt", attempt + 1, "success:", r.success, "steps:", r.steps, "reason:", r.stopped_reason)
        if r.success:
            break
    return r


def pick_place_tries(robo, obj, target, relation, tries, label="attempt"):
    """Up to `tries` pick-and-places, stopping once one is placed; shows the scene when none was."""
    report = "not tried"
    for attempt in range(tries):
        report = pick_and_place(robo, obj, target, relation)
        print(label, attempt + 1, ":", report)
        if report == "placed":
            break
    if report != "placed":
        robo.show("agentview")
    return report


def do_goal(robo, goal, use_vla, vla_tries, tries):
    """One sub-goal: the VLA first (checked with a fresh look), then the planner's own pick-and-place."""
    if use_vla:
        for attempt in range(vla_tries):
            r = robo.vla(goal["clause"])
            if r.success:
                return "done (task solved)"
            if r.stopped_reason.startswith("not understood"):
                break
            if goal["kind"] != "pick_place":
                # An articulation cannot be checked with locate: trust a policy that says it finished.
                if r.stopped_reason == "policy_done":
                    return "done by the vla"
            elif goal.get("obj") and placed(robo, goal["obj"], goal["target"], goal["relation"]):
                return "done by the vla"
    if goal["kind"] != "pick_place" or not goal.get("obj"):
        return "no strategy"
    report = "not tried"
    for attempt in range(tries):
        report = pick_and_place(robo, goal["obj"], goal["target"], goal["relation"])
        if report == "placed" and placed(robo, goal["obj"], goal["target"], goal["relation"]):
            return "done"
    return "failed: " + report


def choose_goals(robo, goals):
    """Locate every pick-and-place sub-goal's objects once and choose each goal's object and target."""
    seen = locate_all(robo, [n for g in goals if g["kind"] == "pick_place" for n in g["candidates"] + g["refs"] + g["targets"]])
    for g in goals:
        if g["kind"] == "pick_place":
            g["obj"] = choose_object(g, seen)
            g["target"] = choose_target(g, seen)
        print("sub-goal:", g["clause"], "->", g.get("obj"), g["kind"], g.get("target"))
    return seen


def run_goals(robo, goals, use_vla, vla_tries, tries, label=""):
    """The unfinished sub-goals in order, stopping at the first that fails (and showing the scene)."""
    for g in goals:
        if g.get("status", "").startswith("done"):
            continue
        g["status"] = do_goal(robo, g, use_vla, vla_tries, tries)
        print(label + g["clause"], "->", g["status"])
        if not g["status"].startswith("done"):
            robo.show("agentview")
            break


def library(*functions) -> str:
    """The functions' own source, for a cell to define them (the cell's namespace has only robo, np and math)."""
    return "\n\n".join(inspect.getsource(f) for f in functions) + "\n\n"


#: What each kind of cell defines; the code mind pastes these, the tool mind runs the same text.
CHOOSING = (choose_by_side, dist2, locate_all, choose_object, choose_target)
ACTING = (aim_held, beside_spot, beside_placed, pick_and_place, pick_place_tries)
GOALS = CHOOSING + (choose_goals,)
GOALS_ACTING = (aim_held, beside_spot, beside_placed, pick_and_place, placed, do_goal, run_goals)
