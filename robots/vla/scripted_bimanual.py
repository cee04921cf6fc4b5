"""A scripted STAND-IN for a bimanual VLA policy: two-arm lift and handover skills with seeded failures.

This is not a learned model.  It gives the `bimanual` group's `vla` primitive
the behaviour a planner has to cope with — it understands short two-arm
instructions, acts through the robot with the cameras (never simulator
poses), sometimes fails physically, and is judged by robosuite's own success
check — so that the `no_vla` ablation removes something real.  A user with a
served bimanual policy plugs it in behind the same seam
(`robots.vla.base.VLAPolicy`).

* Understanding: an instruction that mentions lifting the pot (or its
  handles) runs `robots.bimanual_skills.lift_pot`; one that mentions handing
  over the hammer runs `hand_over`.  Anything else comes back as
  ``stopped_reason="not understood: ..."`` with no step taken.  Which way
  the arms stand is read from the grippers' own orientation (proprioception,
  as a policy has), not from the task text.
* Acting: the skills run on the robot's primitive implementations without
  the recorder (`skills.direct`), so a trace shows the one `vla` row; at most
  `max_steps` env steps, counted over both arms.
* Failing: with probability `failure_prob`, drawn as the one-arm stand-in
  draws it (keyed on benchmark, task, seed, repeat and call number, the same
  for both agents unless `vla_luck: per_agent`; robots/vla/scripted.py), the
  rollout fails the way a policy does: one arm grasps its handle 4-6 cm off
  (lift), or the right hand lets go before the left has the hammer
  (handover).  Whatever the simulator then says is the outcome.
"""
from __future__ import annotations

import re

import numpy as np

from robots import bimanual_skills, skills
from robots.vla.base import RobotIO, VLAOutcome
from robots.vla.scripted import ScriptedVLA, _Misperceiving, _StepBudgetExceeded, _StepLimitedBackend

_LIFT = re.compile(r"\b(lift|raise|pick up)\b.*\b(pot|handles?)\b|\b(pot|handles?)\b.*\b(lift|raise|up)\b")
_HANDOVER = re.compile(r"\bhand(s|ing)?\s*(it\s+)?over\b|\bhandover\b|\b(pass|give)\b.*\bhammer\b")


class _StepLimitedTwoArms(_StepLimitedBackend):
    """The one-arm stand-in's step cap, also counting steps that move both arms at once."""

    def step_arms(self, actions):
        if self._left <= 0:
            raise _StepBudgetExceeded
        self._left -= 1
        self._backend.step_arms(actions)


class _LetsGoEarly:
    """Primitives whose right hand opens just before the left arm first acts (a handover dropped mid-air)."""

    def __init__(self, prims):
        self._prims, self._armed = prims, True

    def __getattr__(self, name):
        fn = getattr(self._prims, name)

        def call(*args, **kwargs):
            if self._armed and kwargs.get("arm") == "left" and name != "state":
                self._armed = False
                self._prims.set_gripper("open", arm="right")
            return fn(*args, **kwargs)

        return call


def layout_from_grippers(robot) -> str:
    """'parallel' when the right gripper's fingers close along world y at wrist yaw 0, else 'opposed'.

    The closing axis is the grip frame's x axis; the current wrist yaw is taken off it.
    """
    from robots.motion import yaw_of

    _, R = robot.backend.eef_pose("right")
    closing_at_yaw0 = np.arctan2(R[1, 0], R[0, 0]) - yaw_of(R, robot.motions["right"].R_down)
    return "parallel" if abs(np.sin(closing_at_yaw0)) > abs(np.cos(closing_at_yaw0)) else "opposed"


class ScriptedBimanualVLA(ScriptedVLA):
    """Scripted stand-in for a bimanual VLA policy (see the module docstring); NOT a learned model.

    Shares the one-arm stand-in's settings (failure_prob, seed, luck, call count) and draws; only `run` differs.
    """

    name = "scripted-bimanual-vla-standin"
    FAILURE_MODES = ("offset_grasp", "early_release")

    def run(self, io: RobotIO, instruction: str, max_steps: int) -> VLAOutcome:
        self.calls += 1
        robot = getattr(io, "robot", None)
        if robot is None or len(getattr(robot, "arms", ())) < 2:
            return VLAOutcome(0, io.success(), "error: the bimanual stand-in needs a two-arm Robot-backed RobotIO")
        failure, rng = self.draw(self.calls)
        fails = failure is not None
        text = instruction.lower()
        skill = "handover" if _HANDOVER.search(text) else "lift" if _LIFT.search(text) else None
        names = set(robot.backend.segmentation_names().values())
        if skill is None or (skill == "lift" and "pot_handle0" not in names) or (skill == "handover" and "hammer_handle" not in names):
            return VLAOutcome(0, io.success(), f"not understood: no two-arm skill for {instruction!r} in this scene")
        if io.success():
            return VLAOutcome(0, True, "success")
        layout = layout_from_grippers(robot)

        steps0 = robot.backend.counter.sim_steps
        saved = {arm: m.backend for arm, m in robot.motions.items()}
        limited = _StepLimitedTwoArms(robot.backend, int(max_steps))  # one budget for both arms
        for m in robot.motions.values():
            m.backend = limited
        prims = skills.direct(robot)
        try:
            if skill == "lift":
                if fails:
                    arm_name = rng.choice(["pot_handle0", "pot_handle1"])
                    angle = rng.uniform(0, 2 * np.pi)
                    offset = rng.uniform(0.04, 0.06) * np.array([np.cos(angle), np.sin(angle), 0.0])
                    prims = _Misperceiving(prims, str(arm_name), offset)
                bimanual_skills.lift_pot(prims, layout)
            else:
                bimanual_skills.hand_over(_LetsGoEarly(prims) if fails else prims, layout)
            reason = "success" if io.success() else "policy_done"
        except _StepBudgetExceeded:
            reason = "max_steps"
        finally:
            for arm, m in robot.motions.items():
                m.backend = saved[arm]
        steps = robot.backend.counter.sim_steps - steps0
        success = io.success()
        return VLAOutcome(steps, success, "success" if success else reason)
