"""Frozen result records of the primitives: ordinary failure is a field, not an exception."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np


def summarize(value: Any) -> Any:
    """JSON-friendly summary of a result: arrays become shape/dtype/range, floats are rounded."""
    if isinstance(value, np.ndarray):
        if value.size <= 16:
            return np.round(value.astype(float), 4).tolist()
        return {
            "array": list(value.shape),
            "dtype": str(value.dtype),
            "min": float(np.min(value)) if value.size else None,
            "max": float(np.max(value)) if value.size else None,
        }
    if isinstance(value, (np.floating, float)):
        return round(float(value), 4)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (list, tuple)):
        return [summarize(v) for v in value]
    if isinstance(value, dict):
        return {k: summarize(v) for k, v in value.items()}
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: summarize(getattr(value, f.name)) for f in fields(value)}
    return value


class _Result:
    def summary(self) -> dict[str, Any]:
        return summarize(self)

    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True)
class RobotState(_Result):
    eef_pos: tuple[float, float, float]
    """Gripper centre (between the fingertips), world frame, metres."""
    eef_yaw: float
    """Wrist yaw about world z, radians, 0 = the start pose."""
    gripper_width_m: float
    holding: bool
    """Fingers closed on something (width clearly above fully closed)."""
    sim_steps: int


@dataclass(frozen=True)
class Located(_Result):
    name: str
    found: bool
    position: tuple[float, float, float] | None
    """Centre of the visible surface's robust bounding box, world frame, metres."""
    extent: tuple[float, float, float] | None
    """Size of that box along x, y, z (metres)."""
    top_z: float | None
    """Height of the object's top surface."""
    score: float
    """0..1: share of the expected views in which the object was seen."""
    n_points: int

    @property
    def ok(self) -> bool:
        return self.found


@dataclass(frozen=True)
class Segmented(_Result):
    prompt: str
    camera: str
    found: bool
    score: float
    n_pixels: int
    bbox: tuple[int, int, int, int] | None
    """(row_min, col_min, row_max, col_max) in the upright image."""
    mask: np.ndarray
    """(H, W) bool mask in the upright image."""

    @property
    def ok(self) -> bool:
        return self.found


@dataclass(frozen=True)
class Move(_Result):
    reached: bool
    final_dist_m: float
    steps: int

    @property
    def ok(self) -> bool:
        return self.reached


@dataclass(frozen=True)
class BothMoves(_Result):
    right: Move
    left: Move

    @property
    def ok(self) -> bool:
        return self.right.reached and self.left.reached


@dataclass(frozen=True)
class Rotate(_Result):
    yaw: float
    reached: bool
    steps: int

    @property
    def ok(self) -> bool:
        return self.reached


@dataclass(frozen=True)
class Gripper(_Result):
    width_m: float
    holding: bool
    steps: int


@dataclass(frozen=True)
class VLAResult(_Result):
    policy: str
    success: bool
    """The benchmark's success check after the rollout."""
    steps: int
    stopped_reason: str

    @property
    def ok(self) -> bool:
        return self.success


@dataclass(frozen=True)
class Shown(_Result):
    camera: str
    image_index: int
    """Position of this image among those returned at the end of the cell or call."""


@dataclass(frozen=True)
class CameraInfo(_Result):
    camera: str
    width: int
    height: int
    intrinsics: list
    extrinsics: list
