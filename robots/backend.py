"""The Backend protocol every benchmark family implements, and the records it returns.

A backend owns one simulator instance.  It resets to a task instance, steps
the robot with 7-D delta end-effector actions, renders a named camera on
demand (RGB, metric depth, or per-pixel object names), reports the benchmark's
own success check, and counts simulator steps.  Everything above it (the Robot
facade, perception, the VLA stand-in) goes through this protocol only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

RenderKind = Literal["rgb", "depth", "segmentation"]


def ensure_headless_gl() -> None:
    """Default to EGL offscreen rendering when the user has not chosen a GL backend."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


#: Settling after an init state: at least LIBERO's own 10 zero-action steps, then until nothing
#: moves (every joint and free body under `SETTLED_QVEL` for 2 steps in a row), at most `SETTLE_MAX_STEPS`.
SETTLE_MIN_STEPS = 10
SETTLE_MAX_STEPS = 80
SETTLED_QVEL = 0.01


def settle(step, sim, min_steps: int = SETTLE_MIN_STEPS, max_steps: int = SETTLE_MAX_STEPS) -> int:
    """Zero-action env steps (`step()`) until the scene is at rest; returns how many were taken.

    Some init states start with objects inside one another (LIBERO-PRO's
    position swaps): the solver pushes them apart and can throw them half a
    metre up, still in the air after a fixed 10 steps.  The agent's first
    images and measurements must show the scene it will act in, at rest.
    """
    still = 0
    for n in range(1, max_steps + 1):
        step()
        still = still + 1 if float(np.abs(sim.data.qvel).max()) < SETTLED_QVEL else 0
        if n >= min_steps and still >= 2:
            return n
    return max_steps


@dataclass(frozen=True)
class TaskCard:
    """What the planner is told about a task instance at the start."""

    benchmark: str
    suite: str
    task: str
    """suite/index, e.g. libero_spatial_swap/0."""
    task_index: int
    seed: int
    instruction: str
    objects: tuple[str, ...]
    """Names `locate` accepts: the scene's movable objects and fixtures."""
    cameras: tuple[str, ...]
    arms: tuple[str, ...] = ("right",)
    guide: str | None = None
    """Operating guide (Markdown), None when the benchmark has none."""


@dataclass(frozen=True)
class CameraMeta:
    """Pinhole model of one camera at one resolution, world frame, metres."""

    camera: str
    width: int
    height: int
    intrinsics: list[list[float]]
    """3x3 K matrix."""
    extrinsics: list[list[float]]
    """4x4 camera-to-world pose (OpenGL camera axes: x right, y up, looking down -z)."""


@dataclass
class StepCounter:
    sim_steps: int = 0
    renders: dict[str, int] = field(default_factory=dict)


class Backend(Protocol):
    name: str
    counter: StepCounter

    def reset(self, task: str, seed: int) -> TaskCard: ...

    def step(self, action: np.ndarray, arm: str = "right") -> None: ...

    def render(self, camera: str, kind: RenderKind = "rgb", size: int | None = None) -> np.ndarray:
        """Upright image: rgb (H,W,3) uint8; depth (H,W) float metres; segmentation (H,W) object-name ids."""
        ...

    def segmentation_names(self) -> dict[int, str]:
        """Map of segmentation ids (as returned by render(kind='segmentation')) to object names."""
        ...

    def camera_meta(self, camera: str, size: int | None = None) -> CameraMeta: ...

    def eef_pose(self, arm: str = "right") -> tuple[np.ndarray, np.ndarray]:
        """End-effector position (3,) and rotation matrix (3,3), world frame."""
        ...

    def gripper_width(self, arm: str = "right") -> float: ...

    def success(self) -> bool: ...

    def close(self) -> None: ...

    def info(self) -> dict[str, Any]: ...
