"""The seam between the `vla` primitive and whatever policy drives it.

A policy gets a `RobotIO` — observe the robot, step it with one 7-D delta
end-effector action (OSC_POSE: dx, dy, dz, dax, day, daz in [-1, 1], gripper
-1 open / +1 close), ask the benchmark whether the task is done — and runs a
closed loop for at most `max_steps` env steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class RobotIO(Protocol):
    def observe(self) -> dict[str, np.ndarray]:
        """Keys: 'agentview_rgb' (H,W,3 uint8, upright), 'wrist_rgb' (H,W,3 uint8),
        'eef_pos' (3,), 'eef_quat' (4, xyzw), 'gripper_qpos' (2,), 'state' (8,) =
        eef_pos + axis-angle(3) + gripper_qpos(2), as LIBERO policies expect.
        A two-arm IO (`arms == ('left', 'right')`) returns per-arm keys and a
        14-D 'state' instead; see `robots/vla/io.py`."""
        ...

    def step(self, action: np.ndarray) -> None:
        """Apply one 7-D action (14-D, left arm first, on a two-arm IO) for one env step."""
        ...

    def success(self) -> bool:
        ...


@dataclass(frozen=True)
class VLAOutcome:
    steps: int
    """Env steps the policy took."""
    success: bool
    """Benchmark success check at the end of the rollout."""
    stopped_reason: str
    """'success', 'max_steps', 'policy_done' or 'error: ...'."""


class VLAPolicy(Protocol):
    name: str

    def run(self, io: RobotIO, instruction: str, max_steps: int) -> VLAOutcome:
        ...
