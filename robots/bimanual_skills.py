"""Two-arm skills composed only from the Robot's primitives: lift a pot by its handles, hand over a hammer.

The geometry is in plain functions of `locate` results (`lift_plan`,
`handover_plan`, `left_grasp`) that use nothing but NumPy and this module's
constants, so the scripted planner's tool calls, the code it writes into
cells (it pastes their source, `PLANNING_SOURCE`) and the VLA stand-in all
compute the same thing from the same measurements.  Nothing here reads the
simulator: positions come from the cameras, the arms' state from `state`.

Recipes measured on robosuite 1.4's TwoArmLift / TwoArmHandover with two
Pandas (OSC_POSE, 20 Hz):

* a pot handle is a 2 cm bar: the fingers close across it (the closing axis
  along the line through both handles) at the bar's height, after a 10 cm
  descent from above; then both arms rise together (`move_both`) so the pot
  stays level — 20 cm clears robosuite's 10 cm success margin;
* the hammer handle is a 3-4 cm box, 10-25 cm long.  The right arm grasps it
  near one end (not far toward the free end: the heavy head then swings
  down), lifts it to z = 1.0, turns its wrist so that the rest of the handle
  points away from it (toward the left arm, or along x), and brings it to
  the middle; the left arm closes on that part 3-7 cm from the right's grasp
  (the hands are ~6 cm thick along the handle, so short handles are tight)
  at the height the measured tilt of the hanging hammer gives there; then
  the right arm lets go;
* a Panda wrist turns about -2.1..+3.6 rad from its start pose, less when
  the arm reaches sideways: the right arm reaching toward +y must keep its
  yaw within ~pi/2 of +pi/2 (side by side) or 0 (facing), which decides how
  the hammer is picked up and turned.
"""
from __future__ import annotations

import inspect

import numpy as np

#: Where the fingers close on a bar: this far below the measured top (the bars are 2-4 cm thick).
BAR_GRASP_BELOW_TOP_M = 0.018
APPROACH_ABOVE_M = 0.10
LIFT_M = 0.20
#: Hammer carried at this height (the table top is at z = 0.80; success wants the hammer 10 cm above it).
CARRY_Z = 1.0
#: Left grasp this far along the handle from the right's: at most (the hands are ~6 cm thick), at least.
MAX_SPACING_M = 0.07
MIN_SPACING_M = 0.03
#: Room above which a side of the handle counts as comfortable.
GOOD_ROOM_M = 0.05
#: The handle box's width (3-4 cm), for its length from a diagonal bounding box.
HANDLE_WIDTH_M = 0.035
#: A grasp centre stays this far from the handle's free end, and from the head's face.
FREE_END_MARGIN_M = 0.015
HEAD_MARGIN_M = 0.02
#: Half the head's thickness along the handle, at most (robosuite samples 1.5-2.5 cm).
HEAD_HALF_M = 0.025
#: On the table the right grasps this far into the handle from the head, or at most this far past its centre.
PICK_INTO_HANDLE_M = 0.035
MAX_PAST_CENTRE_M = 0.03
#: A wrist may end a turn this far from its safe yaw (beyond, a Panda wrist reaching sideways hits its stop).
WRIST_SLACK_RAD = 1.92
#: The right wrist reaches yaws from about this up to pi at the pick (turning from 0 the short way).
MIN_PICK_YAW_RAD = -2.0
#: The left closes this far below the tilt-predicted bar height (the fingerpads sit low on the fingers).
LEFT_GRASP_DROP_M = 0.005
#: Where the two grasps are centred at the handover, per layout (midway between the arms, y = 0).
MEET_X = {"parallel": -0.15, "opposed": 0.0}
#: A hammer that starts in the hand is first brought here (y; x and z as the meeting) to be seen well.
VIEW_Y = -0.15


def layout_of(instruction: str) -> str:
    """'parallel' (arms side by side) or 'opposed' (facing each other), from the task's wording."""
    return "opposed" if "face each other" in instruction else "parallel"


def wrap_full(a):
    return float((a + np.pi) % (2 * np.pi) - np.pi)


def close_along_yaw(angle, layout):
    """Wrist yaw in [-pi/2, pi/2) that makes the fingers close along a world direction (radians).

    At yaw 0 the fingers close along world y when the arms stand side by side, along x when they face.
    """
    return float((angle - (np.pi / 2 if layout == "parallel" else 0.0) + np.pi / 2) % np.pi - np.pi / 2)


def lift_plan(handle_a, handle_b, layout):
    """Both grasps from two located handle bars (dicts with position, top_z): the right arm takes the -y one."""
    a, b = sorted((handle_a, handle_b), key=lambda h: h["position"][1])
    axis = np.subtract(b["position"], a["position"])
    yaw = close_along_yaw(np.arctan2(axis[1], axis[0]), layout)
    grasp = {arm: [round(float(h["position"][0]), 4), round(float(h["position"][1]), 4),
                   round(float(h["top_z"]) - BAR_GRASP_BELOW_TOP_M, 4)]
             for arm, h in (("right", a), ("left", b))}
    return {"grasp": grasp, "yaw": round(yaw, 4)}


def handover_plan(handle, head, layout, right_yaw=None, right_pos=None):
    """The handover from the located handle and head (dicts); right_yaw/right_pos when the right holds it.

    Returns pick (right's grasp on the table), pick_yaw, turn (right wrist turn after lifting),
    spacing and direction (where the left grasps relative to the right), meet_right, left_yaw.
    """
    h, k = np.asarray(handle["position"], float), np.asarray(head["position"], float)
    d = (h - k)[:2] / max(float(np.linalg.norm((h - k)[:2])), 1e-6)  # head -> handle end
    ex, ey = handle["extent"][0], handle["extent"][1]
    half = max(0.02, (ex * abs(d[0]) + ey * abs(d[1]) - 2 * HANDLE_WIDTH_M * abs(d[0] * d[1])) / 2)
    # Along d from the head's centre: where the handle leaves the head (a hand may hide that part of the
    # handle, never the head's own size) and its free end (the far end of what the cameras see).
    mid = float((h[:2] - k[:2]) @ d)
    start, end = min(mid - half, HEAD_HALF_M), mid + half
    safe = np.pi / 2 if layout == "parallel" else 0.0  # right wrist yaw that keeps room to turn (fingers along x)
    best = None
    for side in (1.0, -1.0):  # +1: the left takes the part toward the free end, -1: toward the head
        if right_pos is None:
            centre = (start + end) / 2
            at = start + PICK_INTO_HANDLE_M if side > 0 else centre + max(0.0, min(MAX_PAST_CENTRE_M, end - centre - 0.025))
            pick_xy = k[:2] + d * at
        else:
            pick_xy = np.asarray(right_pos[:2], float)
            at = float((pick_xy - k[:2]) @ d)
        room = (end - at - FREE_END_MARGIN_M) if side > 0 else (at - start - HEAD_MARGIN_M)
        part = np.arctan2(side * d[1], side * d[0])
        # Where the left's part should point: +y (toward the left arm), else +x (away from the bases: a left
        # hand at -x of the right one lands on the right's wrist).
        for target in (np.pi / 2, 0.0):
            turn = wrap_full(target - part)
            finals = [safe] if target == np.pi / 2 else [safe - np.pi / 2, safe + np.pi / 2]
            for final in finals:
                if right_pos is None:  # pick at yaw0, turn after lifting: a short turn, both yaws in range
                    yaw0 = wrap_full(final - turn)
                    ok = abs(turn) <= np.pi / 2 + 0.1 and yaw0 >= MIN_PICK_YAW_RAD
                else:
                    yaw0 = float(right_yaw)
                ok = (right_pos is not None or ok) and abs(yaw0 + turn - safe) <= WRIST_SLACK_RAD
                key = (not ok, -min(room, GOOD_ROOM_M), target != np.pi / 2, abs(turn))
                if best is None or key < best[0]:
                    best = (key, side, target, turn, yaw0, pick_xy, room)
    _, side, target, turn, yaw0, pick_xy, room = best
    spacing = float(np.clip(room, MIN_SPACING_M, MAX_SPACING_M))
    direction = [round(float(np.cos(target)), 4), round(float(np.sin(target)), 4)]
    meet = np.array([MEET_X[layout], 0.0]) - np.array(direction) * spacing / 2
    left_yaw = close_along_yaw(target + np.pi / 2, layout)
    return {
        "pick": [round(float(pick_xy[0]), 4), round(float(pick_xy[1]), 4),
                 round(float(handle["top_z"]) - BAR_GRASP_BELOW_TOP_M, 4)],
        "pick_yaw": round(yaw0, 4),
        "turn": round(turn, 4),
        "side": side,
        "spacing": round(spacing, 4),
        "direction": direction,
        "meet_right": [round(float(meet[0]), 4), round(float(meet[1]), 4), CARRY_Z],
        "left_yaw": round(left_yaw, 4),
    }


def left_grasp(plan, right_pos, handle_air, head_air):
    """Where the left closes: `spacing` along `direction` from the right's grasp, at the bar height the tilt gives."""
    h, k = np.asarray(handle_air["position"], float), np.asarray(head_air["position"], float)
    run = max(float(np.linalg.norm((h - k)[:2])), 0.05)
    slope = (h[2] - k[2]) / run  # rise per metre from the head toward the handle's end
    z = right_pos[2] + plan["side"] * plan["spacing"] * slope - LEFT_GRASP_DROP_M
    return [round(float(right_pos[0] + plan["direction"][0] * plan["spacing"]), 4),
            round(float(right_pos[1] + plan["direction"][1] * plan["spacing"]), 4), round(float(z), 4)]


def _constants_source() -> str:
    names = [n for n in globals() if n.isupper() and not n.startswith("_")]
    return "\n".join(f"{n} = {globals()[n]!r}" for n in names if n != "PLANNING_SOURCE")


#: The planning functions' own source, for a code cell to define them (it sees only `robo`, `np`, `math`).
PLANNING_SOURCE = {
    "lift": "\n".join([_constants_source(), ""] + [inspect.getsource(f) for f in (close_along_yaw, lift_plan)]),
    "handover": "\n".join([_constants_source(), ""] + [inspect.getsource(f) for f in
                                                       (wrap_full, close_along_yaw, handover_plan, left_grasp)]),
}


def _as_dict(loc) -> dict:
    return {"position": loc.position, "top_z": loc.top_z, "extent": loc.extent}


def lift_pot(p, layout: str) -> bool:
    """Grasp both handles and lift the pot level; p has the Robot's primitives. False on a failed step."""
    h0, h1 = p.locate("pot_handle0"), p.locate("pot_handle1")
    if not (h0.found and h1.found):
        return False
    plan = lift_plan(_as_dict(h0), _as_dict(h1), layout)
    for arm in ("right", "left"):
        x, y, z = plan["grasp"][arm]
        p.set_gripper("open", arm=arm)
        p.rotate_wrist(plan["yaw"], arm=arm)
        p.move_to([x, y, z + APPROACH_ABOVE_M], arm=arm)
        p.move_to([x, y, z], arm=arm)
        if not p.set_gripper("close", arm=arm).holding:
            p.move_to([x, y, z + APPROACH_ABOVE_M], arm=arm)
            return False
    r, l = plan["grasp"]["right"], plan["grasp"]["left"]
    p.move_both([r[0], r[1], r[2] + LIFT_M], [l[0], l[1], l[2] + LIFT_M])
    return p.state("right").holding and p.state("left").holding


def hand_over(p, layout: str) -> bool:
    """Right arm picks the hammer up (unless it holds it), left arm takes it by the handle, right lets go."""
    right = p.state("right")
    if right.holding:
        # Near the table edge the cameras see little of a hammer in hand: bring it to the middle first.
        p.move_to([MEET_X[layout], VIEW_Y, CARRY_Z], arm="right")
        right = p.state("right")
    handle, head = p.locate("hammer_handle"), p.locate("hammer_head")
    if not (handle.found and head.found):
        return False
    holding = right.holding
    plan = handover_plan(_as_dict(handle), _as_dict(head), layout,
                         right.eef_yaw if holding else None, right.eef_pos if holding else None)
    if not holding:
        x, y, z = plan["pick"]
        p.set_gripper("open", arm="right")
        p.rotate_wrist(plan["pick_yaw"], arm="right")
        p.move_to([x, y, z + APPROACH_ABOVE_M], arm="right")
        p.move_to([x, y, z], arm="right")
        if not p.set_gripper("close", arm="right").holding:
            p.move_to([x, y, z + APPROACH_ABOVE_M], arm="right")
            return False
        right = p.state("right")
        p.move_to([right.eef_pos[0], right.eef_pos[1], CARRY_Z], arm="right")
    p.rotate_wrist(right.eef_yaw + plan["turn"], arm="right")
    p.move_to(plan["meet_right"], arm="right")
    right = p.state("right")
    if not right.holding:
        return False
    lx, ly, lz = left_grasp(plan, right.eef_pos, _as_dict(p.locate("hammer_handle")), _as_dict(p.locate("hammer_head")))
    p.rotate_wrist(plan["left_yaw"], arm="left")
    p.move_to([lx, ly, lz + APPROACH_ABOVE_M], arm="left")
    p.move_to([lx, ly, lz], arm="left")
    if not p.set_gripper("close", arm="left").holding:
        return False
    p.release(0.1, arm="right")
    return p.state("left").holding
