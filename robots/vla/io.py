"""RobotIO over a Robot: what a VLA policy sees and how it acts, via the backend."""
from __future__ import annotations

import numpy as np

from robots.motion import axis_angle


class BackendIO:
    def __init__(self, robot):
        self.robot = robot
        self.backend = robot.backend

    def observe(self) -> dict[str, np.ndarray]:
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

    def step(self, action: np.ndarray) -> None:
        self.backend.step(np.asarray(action, dtype=float))
        # Keep the motion controller's gripper command in sync with what the policy did.
        self.robot.motion.gripper_cmd = 1.0 if action[-1] > 0 else -1.0

    def success(self) -> bool:
        return self.backend.success()
