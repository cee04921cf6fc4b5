"""RobotIO over a Robot: what a VLA policy sees and how it acts, via the backend.

One arm (LIBERO): the observation and the 7-D action of `robots/vla/base.py`.

Two arms (the bimanual group: 'right' = robot0, 'left' = robot1): the same
per-arm quantities, laid out the way openpi's two-arm (ALOHA-style) policies
order their 14-D vectors — left arm first, 7 numbers per arm.  The Pandas here
run robosuite's end-effector controller (OSC_POSE), not ALOHA's joint
position control, so the 7 numbers of an arm are end-effector ones, the same
the one-arm path uses:

* state, per arm: eef position (3, world, metres), eef orientation as a
  world-frame axis-angle (3), gripper opening width (1, metres);
* action, per arm: the 7-D delta OSC_POSE action (dx, dy, dz, dax, day, daz in
  [-1, 1]; gripper -1 open / +1 close).

A 14-D action steps both arms in the same env step (`backend.step_arms`).
"""
from __future__ import annotations

import numpy as np

from robots.motion import axis_angle

#: Two-arm action/state layout: arms in this order, 7 numbers each (openpi's ALOHA order: left first).
TWO_ARM_ORDER = ("left", "right")
ARM_DIM = 7
#: Each arm's wrist camera on the bimanual backend.
WRIST_CAMERA = {"right": "robot0_eye_in_hand", "left": "robot1_eye_in_hand"}


class BackendIO:
    def __init__(self, robot):
        self.robot = robot
        self.backend = robot.backend
        two = len(getattr(robot, "arms", ("right",))) > 1
        #: Arms in action/state order: ('right',) for one arm, TWO_ARM_ORDER for two.
        self.arms: tuple[str, ...] = TWO_ARM_ORDER if two else ("right",)
        self.action_dim = ARM_DIM * len(self.arms)

    def observe(self) -> dict[str, np.ndarray]:
        if len(self.arms) > 1:
            return self._observe_two_arms()
        pos, R = self.backend.eef_pose()
        q = np.asarray(self.backend.gripper_qpos() if hasattr(self.backend, "gripper_qpos") else [0.0, 0.0])
        return {
            "agentview_rgb": self.backend.render("agentview", "rgb", 224),
            "wrist_rgb": self.backend.render("robot0_eye_in_hand", "rgb", 224),
            "eef_pos": pos,
            "eef_rotmat": R,
            "gripper_qpos": q,
            "state": np.concatenate([pos, axis_angle(R), q]).astype(np.float32),
        }

    def _observe_two_arms(self) -> dict[str, np.ndarray]:
        """'agentview_rgb', '{arm}_wrist_rgb', '{arm}_eef_pos', '{arm}_eef_rotmat',
        '{arm}_gripper_qpos' per arm, and 'state' (14,) = per arm (left first)
        eef pos(3) + axis-angle(3) + gripper opening width(1)."""
        obs: dict[str, np.ndarray] = {"agentview_rgb": self.backend.render("agentview", "rgb", 224)}
        state = []
        for arm in self.arms:
            pos, R = self.backend.eef_pose(arm)
            q = np.asarray(self.backend.gripper_qpos(arm), dtype=np.float64)
            obs[f"{arm}_wrist_rgb"] = self.backend.render(WRIST_CAMERA[arm], "rgb", 224)
            obs[f"{arm}_eef_pos"], obs[f"{arm}_eef_rotmat"], obs[f"{arm}_gripper_qpos"] = pos, R, q
            state.append(np.concatenate([pos, axis_angle(R), [abs(q[0] - q[1])]]))
        obs["state"] = np.concatenate(state).astype(np.float32)
        return obs

    def step(self, action: np.ndarray) -> None:
        if len(self.arms) > 1:
            a = np.asarray(action, dtype=float).reshape(self.action_dim)
            per_arm = {arm: a[ARM_DIM * i: ARM_DIM * (i + 1)] for i, arm in enumerate(self.arms)}
            self.backend.step_arms(per_arm)
            for arm, arm_action in per_arm.items():
                self.robot.motions[arm].gripper_cmd = 1.0 if arm_action[-1] > 0 else -1.0
            return
        self.backend.step(np.asarray(action, dtype=float))
        # Keep the motion controller's gripper command in sync with what the policy did.
        self.robot.motion.gripper_cmd = 1.0 if action[-1] > 0 else -1.0

    def success(self) -> bool:
        return self.backend.success()
