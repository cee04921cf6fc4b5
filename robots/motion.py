"""Closed-loop end-effector control over a backend's delta OSC_POSE actions.

Recipe measured on LIBERO's default controller: action +-1 is 5 cm / 0.5 rad
per step at 20 Hz (rotation as a world-frame axis-angle); gripper -1 opens
(~7.8 cm), +1 closes.  Speed and the per-step change of the action are capped
(a jerky start drops a rim-held bowl), and the gripper is kept pointing down
at a commanded yaw.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POS_SCALE = 0.05  # metres per unit action
ROT_SCALE = 0.5  # radians per unit action
MAX_ACTION = 0.6
MAX_DELTA_ACTION = 0.15
GRIPPER_OPEN, GRIPPER_CLOSE = -1.0, 1.0


def rotation_z(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def axis_angle(R: np.ndarray) -> np.ndarray:
    """Log map of a rotation matrix: axis * angle (world frame)."""
    cos = np.clip((np.trace(R) - 1) / 2, -1.0, 1.0)
    angle = np.arccos(cos)
    if angle < 1e-6:
        return np.zeros(3)
    v = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    if np.pi - angle < 1e-3:  # near pi the antisymmetric part vanishes; use the diagonal
        axis = np.sqrt(np.maximum((np.diag(R) + 1) / 2, 0))
        axis = axis * np.sign(np.where(v == 0, 1, v))
        return axis / np.linalg.norm(axis) * angle
    return v / (2 * np.sin(angle)) * angle


def yaw_of(R: np.ndarray, R_down: np.ndarray) -> float:
    """Yaw of orientation R about world z, relative to the reference gripper-down pose."""
    Rz = R @ R_down.T
    return float(np.arctan2(Rz[1, 0], Rz[0, 0]))


@dataclass
class MotionOutcome:
    reached: bool
    final_dist_m: float
    steps: int


class MotionController:
    """Moves one arm of a backend; keeps the gripper command between calls."""

    def __init__(self, backend, arm: str = "right"):
        self.backend = backend
        self.arm = arm
        # A two-arm task may start with something already in a hand: keep that gripper closed.
        initial = getattr(backend, "gripper_command_at_reset", None)
        self.gripper_cmd = initial(arm) if initial is not None else GRIPPER_OPEN
        _, self.R_down = backend.eef_pose(arm)
        self.yaw = 0.0
        self._last = np.zeros(6)

    def _action(self, target: np.ndarray, speed: float) -> tuple[np.ndarray, float]:
        pos, R = self.backend.eef_pose(self.arm)
        err = target - pos
        dist = float(np.linalg.norm(err))
        # Proportional with a distance-dependent gain: fast far away, gentle near the goal.
        a_pos = np.clip(err / POS_SCALE * 2.0, -MAX_ACTION * speed, MAX_ACTION * speed)
        R_goal = rotation_z(self.yaw) @ self.R_down
        a_rot = np.clip(axis_angle(R_goal @ R.T) / ROT_SCALE * 1.5, -0.5, 0.5)
        a = np.concatenate([a_pos, a_rot])
        a = self._last + np.clip(a - self._last, -MAX_DELTA_ACTION, MAX_DELTA_ACTION)
        self._last = a
        return np.append(a, self.gripper_cmd), dist

    def move_to(self, target, tol: float = 0.008, max_steps: int = 250, speed: float = 1.0) -> MotionOutcome:
        target = np.asarray(target, dtype=float)
        steps, dist = 0, float("inf")
        settled = 0
        for steps in range(1, max_steps + 1):
            action, dist = self._action(target, speed)
            self.backend.step(action, self.arm)
            if dist < tol:
                settled += 1
                if settled >= 3:
                    break
            else:
                settled = 0
        pos, _ = self.backend.eef_pose(self.arm)
        dist = float(np.linalg.norm(target - pos))
        self._last = np.zeros(6)
        return MotionOutcome(reached=dist < max(tol * 2, 0.015), final_dist_m=dist, steps=steps)

    def hold(self, steps: int) -> None:
        """Keep the current pose for `steps` steps (e.g. while the fingers move)."""
        pos, _ = self.backend.eef_pose(self.arm)
        for _ in range(steps):
            action, _ = self._action(pos, 0.5)
            self.backend.step(action, self.arm)
        self._last = np.zeros(6)

    def set_gripper(self, close: bool, max_steps: int = 25) -> int:
        self.gripper_cmd = GRIPPER_CLOSE if close else GRIPPER_OPEN
        pos, _ = self.backend.eef_pose(self.arm)
        last_w, still, n = None, 0, 0
        for n in range(1, max_steps + 1):
            action, _ = self._action(pos, 0.5)
            self.backend.step(action, self.arm)
            w = self.backend.gripper_width(self.arm)
            if last_w is not None and abs(w - last_w) < 2e-4:
                still += 1
                if still >= 3 and n >= 6:
                    break
            else:
                still = 0
            last_w = w
        self._last = np.zeros(6)
        return n

    def rotate_to(self, yaw: float, max_steps: int = 120) -> tuple[float, int]:
        self.yaw = float(np.arctan2(np.sin(yaw), np.cos(yaw)))
        pos, _ = self.backend.eef_pose(self.arm)
        n = 0
        for n in range(1, max_steps + 1):
            action, _ = self._action(pos, 0.5)
            self.backend.step(action, self.arm)
            _, R = self.backend.eef_pose(self.arm)
            if abs(np.arctan2(np.sin(yaw_of(R, self.R_down) - self.yaw), np.cos(yaw_of(R, self.R_down) - self.yaw))) < 0.03:
                break
        self._last = np.zeros(6)
        _, R = self.backend.eef_pose(self.arm)
        return yaw_of(R, self.R_down), n


def move_together(controllers: dict[str, MotionController], targets: dict[str, np.ndarray],
                  tol: float = 0.008, max_steps: int = 250) -> dict[str, MotionOutcome]:
    """Move several arms of one backend in the same env steps (`backend.step_arms`), arriving together.

    Each arm's speed cap is scaled by its share of the longest distance, so an
    object held by both hands stays level while they carry it.
    """
    backend = next(iter(controllers.values())).backend
    targets = {arm: np.asarray(t, dtype=float) for arm, t in targets.items()}
    start = {arm: float(np.linalg.norm(targets[arm] - backend.eef_pose(arm)[0])) for arm in controllers}
    longest = max(max(start.values()), 1e-6)
    speeds = {arm: max(0.2, d / longest) for arm, d in start.items()}
    settled, steps = 0, 0
    for steps in range(1, max_steps + 1):
        actions, dists = {}, []
        for arm, c in controllers.items():
            actions[arm], d = c._action(targets[arm], speeds[arm])
            dists.append(d)
        backend.step_arms(actions)
        if max(dists) < tol:
            settled += 1
            if settled >= 3:
                break
        else:
            settled = 0
    out = {}
    for arm, c in controllers.items():
        c._last = np.zeros(6)
        d = float(np.linalg.norm(targets[arm] - backend.eef_pose(arm)[0]))
        out[arm] = MotionOutcome(reached=d < max(tol * 2, 0.015), final_dist_m=d, steps=steps)
    return out
