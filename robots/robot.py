"""The Robot facade: every primitive defined once — signature, docstring, result type, acting or not.

The code agent calls these methods on `robo`; the tool agent's JSON schemas
and the code agent's API reference are both generated from them
(`robots.api_docs`).  One marker, `@primitive(acting=...)`, decides whether a
call moves the robot: acting primitives pass the episode's success guard
first and, in tool calling, return camera images.
"""
from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

from robots import perception
from robots.motion import MotionController, move_together, yaw_of
from robots.results import (
    BothMoves,
    CameraInfo,
    Gripper,
    Located,
    Move,
    RobotState,
    Rotate,
    Segmented,
    Shown,
    VLAResult,
    summarize,
)

#: A closed Panda gripper reads ~0 width; anything held keeps the fingers apart.
#: Measured: an empty close settles at 1-2 mm, a bowl pinched by its rim wall reads 3.7 mm.
HOLDING_MIN_WIDTH_M = 0.003
# z reaches the floor: libero_object scenes put the objects on the floor (z ~ 0), not on a table at ~0.9.
WORKSPACE_LOW = np.array([-0.6, -0.6, -0.05])
WORKSPACE_HIGH = np.array([0.6, 0.6, 1.5])
#: Capability a two-arm backend adds: shows the `arm` argument and `move_both` in both interface views.
TWO_ARMS = "two_arms"


class EpisodeFinished(BaseException):
    """Raised before an acting primitive once the task has succeeded.

    Derived from BaseException so that a cell's `except Exception` cannot swallow it.
    """


@dataclass(frozen=True)
class PrimitiveSpec:
    name: str
    acting: bool
    requires: str | None
    """Capability the primitive needs ('vla'); an ablation that removes it hides the primitive."""
    fn: Callable


def primitive(acting: bool, requires: str | None = None):
    """Mark a Robot method as a primitive; acting ones pass the success guard and are recorded."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self: "Robot", *args, **kwargs):
            if requires and requires not in self.capabilities:
                raise ValueError(f"primitive {fn.__name__!r} is not available in this episode (no {requires})")
            try:
                bound = inspect.signature(fn).bind(self, *args, **kwargs)
            except TypeError as e:
                raise ValueError(f"{fn.__name__}: {e}") from None
            if acting and self.guard is not None:
                self.guard()
            steps0, t0 = self.backend.counter.sim_steps, time.perf_counter()
            result, ok, rejected = None, False, False
            try:
                result = fn(*bound.args, **bound.kwargs)
                ok = bool(getattr(result, "ok", True))
                return result
            except ValueError:
                rejected = True  # bad arguments (a target outside the workspace...): refused before acting
                raise
            finally:
                if self.recorder is not None:
                    args_rec = {k: summarize(v) for k, v in list(bound.arguments.items())[1:]}
                    steps = self.backend.counter.sim_steps - steps0
                    self.recorder(
                        name=fn.__name__,
                        args=args_rec,
                        # A call refused before the simulator stepped moved nothing: on record, not acting.
                        acting=acting and not (rejected and steps == 0),
                        ok=ok,
                        result=summarize(result) if result is not None else {},
                        sim_steps=steps,
                        wall_s=time.perf_counter() - t0,
                    )

        wrapper.__primitive__ = PrimitiveSpec(fn.__name__, acting, requires, fn)
        return wrapper

    return deco


def _target(value, primitive_name: str, arg: str) -> np.ndarray:
    """A validated gripper target inside the workspace."""
    target = _xyz(value, f"{primitive_name}: {arg}")
    if np.any(target < WORKSPACE_LOW) or np.any(target > WORKSPACE_HIGH):
        what = primitive_name if arg == "xyz" else f"{primitive_name}: {arg}"
        raise ValueError(
            f"{what}: {target.round(3).tolist()} is outside the workspace "
            f"{WORKSPACE_LOW.tolist()}..{WORKSPACE_HIGH.tolist()}"
        )
    return target


def _xyz(value, what: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be three numbers [x, y, z], got {value!r}") from None
    if arr.shape != (3,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be three finite numbers [x, y, z], got {value!r}")
    return arr


class Robot:
    """A robot arm with a gripper in a benchmark scene. World frame: metres, z up.

    All positions are world coordinates in metres; the working surface's
    height depends on the scene (about 0.9 on LIBERO's tabletops, about 0.45
    on its living-room tables, about 0 in its floor scenes): measure it with
    `locate`. Yaw is radians about world
    z, 0 = the start pose.
    """

    def __init__(self, backend, capabilities=("vla",), vla_policy=None, segmentation=None, show_size: int = 256):
        self.backend = backend
        self.capabilities = set(capabilities)
        self.vla_policy = vla_policy
        self.segmentation = segmentation or perception.SimSegmentation(backend)
        self.show_size = show_size
        self.arms: tuple[str, ...] = tuple(getattr(backend, "arms", ("right",)))
        self.motions = {arm: MotionController(backend, arm) for arm in self.arms}
        self.motion = self.motions["right"]
        if len(self.arms) > 1:
            self.capabilities.add(TWO_ARMS)
        self.guard: Callable[[], None] | None = None
        self.recorder: Callable[..., None] | None = None
        self.shown: list[tuple[str, np.ndarray]] = []
        """Images requested with show(), in order; the runtime drains it at the end of a cell/call."""

    # -- read-only -------------------------------------------------------
    @primitive(acting=False)
    def state(self, arm: Literal["right", "left"] = "right") -> RobotState:
        """The gripper's position, wrist yaw, opening width and whether it holds something.

        Args:
            arm: which arm, "right" or "left".
        """
        return self._state_now(arm)

    def _state_now(self, arm: str = "right") -> RobotState:
        motion = self._motion(arm)
        pos, R = self.backend.eef_pose(arm)
        width = self.backend.gripper_width(arm)
        return RobotState(
            eef_pos=tuple(round(float(v), 4) for v in pos),
            eef_yaw=round(yaw_of(R, motion.R_down), 4),
            gripper_width_m=round(width, 4),
            holding=self._holding(width, arm),
            sim_steps=self.backend.counter.sim_steps,
        )

    def state_summary(self):
        """The state returned after an acting tool call: one arm's record, or {arm: record} for two arms."""
        if len(self.arms) == 1:
            return summarize(self._state_now())
        return {arm: summarize(self._state_now(arm)) for arm in self.arms}

    @primitive(acting=False)
    def locate(self, name: str) -> Located:
        """Find an object by name with the cameras: centre, size and top height of what is visible.

        Measured from segmentation and depth images (not from the simulator's
        object poses); accurate to about 1 cm for objects in view. `found` is
        False when no camera sees the object.

        Args:
            name: an object name from the task card, e.g. "plate_1".
        """
        names = list(self.backend.segmentation_names().values())
        if name not in names:
            raise ValueError(f"locate: no object named {name!r}; objects: {', '.join(names)}")
        op = perception.object_points(self.backend, name)
        if len(op.points) < perception.MIN_PIXELS:
            return Located(name, False, None, None, None, 0.0, int(len(op.points)))
        centre, extent, top = perception.summarize_points(op.points)
        score = len(op.cameras) / len(perception.locate_cameras(self.backend))
        return Located(
            name=name,
            found=True,
            position=tuple(round(float(v), 4) for v in centre),
            extent=tuple(round(float(v), 4) for v in extent),
            top_z=round(top, 4),
            score=round(score, 3),
            n_points=int(len(op.points)),
        )

    @primitive(acting=False)
    def segment(self, prompt: str, camera: str = "agentview") -> Segmented:
        """Segment what a text prompt names in one camera image.

        Args:
            prompt: an object name or a description, e.g. "black bowl".
            camera: camera name from the task card.
        """
        # A backend that reads the simulator's ids (sim) gets no RGB frame: rendering one cost ~4x its mask.
        needs_rgb = getattr(self.segmentation, "needs_rgb", True)
        rgb = self.backend.render(camera, "rgb", self.show_size) if needs_rgb else None
        masks = self.segmentation.segment(rgb, prompt, (camera, self.show_size))
        if not masks:
            shape = rgb.shape[:2] if rgb is not None else (self.show_size, self.show_size)
            return Segmented(prompt, camera, False, 0.0, 0, None, np.zeros(shape, dtype=bool))
        mask, score = masks[0].mask, masks[0].score
        rows, cols = np.nonzero(mask)
        bbox = (int(rows.min()), int(cols.min()), int(rows.max()), int(cols.max())) if len(rows) else None
        return Segmented(prompt, camera, bool(len(rows)), float(score), int(len(rows)), bbox, mask)

    @primitive(acting=False)
    def camera_meta(self, camera: str = "agentview") -> CameraInfo:
        """Intrinsics (3x3) and camera-to-world extrinsics (4x4) of a camera at the image size.

        Args:
            camera: camera name from the task card.
        """
        m = self.backend.camera_meta(camera, self.show_size)
        return CameraInfo(m.camera, m.width, m.height, m.intrinsics, m.extrinsics)

    @primitive(acting=False)
    def image(self, camera: str = "agentview") -> np.ndarray:
        """The camera's RGB image as a (H, W, 3) uint8 array, upright, to compute on: it is not shown to you.

        Args:
            camera: camera name from the task card.
        """
        return self.backend.render(camera, "rgb", self.show_size)

    @primitive(acting=False)
    def depth(self, camera: str = "agentview") -> np.ndarray:
        """The camera's metric depth image as a (H, W) float array in metres, upright.

        Args:
            camera: camera name from the task card.
        """
        return self.backend.render(camera, "depth", self.show_size)

    @primitive(acting=False)
    def points(self, name: str) -> np.ndarray:
        """World points (N, 3) of an object's visible surface, from depth + segmentation.

        Args:
            name: an object name from the task card.
        """
        return perception.object_points(self.backend, name).points

    @primitive(acting=False)
    def show(self, camera: str = "agentview") -> Shown:
        """Request a camera image: it is returned to you at the end of this cell or call.

        Args:
            camera: camera name from the task card.
        """
        img = self.backend.render(camera, "rgb", self.show_size)
        self.shown.append((camera, img))
        return Shown(camera, len(self.shown) - 1)

    # -- acting ----------------------------------------------------------
    @primitive(acting=True)
    def move_to(self, xyz: list[float], max_steps: int = 250, arm: Literal["right", "left"] = "right") -> Move:
        """Move the gripper centre to a world position in a straight, speed-capped line.

        The gripper keeps pointing down at its current yaw. `reached` is False
        when the arm stops more than 1.5 cm away (blocked or out of reach).

        Args:
            xyz: target [x, y, z] in metres.
            max_steps: give up after this many control steps (20 per second).
            arm: which arm moves, "right" or "left"; the other one holds still.
        """
        motion = self._motion(arm)
        target = _target(xyz, "move_to", "xyz")
        if not 1 <= int(max_steps) <= 2000:
            raise ValueError("move_to: max_steps must be in 1..2000")
        out = motion.move_to(target, max_steps=int(max_steps))
        return Move(out.reached, round(out.final_dist_m, 4), out.steps)

    @primitive(acting=True, requires=TWO_ARMS)
    def move_both(self, right_xyz: list[float], left_xyz: list[float], max_steps: int = 250) -> BothMoves:
        """Move both grippers at once, each to its own world position, arriving together.

        Use it for anything both hands hold (lifting or carrying one object): the
        arms move in the same control steps, so the object stays level.

        Args:
            right_xyz: the right gripper's target [x, y, z] in metres.
            left_xyz: the left gripper's target [x, y, z] in metres.
            max_steps: give up after this many control steps (20 per second).
        """
        targets = {"right": _target(right_xyz, "move_both", "right_xyz"), "left": _target(left_xyz, "move_both", "left_xyz")}
        if not 1 <= int(max_steps) <= 2000:
            raise ValueError("move_both: max_steps must be in 1..2000")
        out = move_together({arm: self._motion(arm) for arm in targets}, targets, max_steps=int(max_steps))
        r, l = out["right"], out["left"]
        return BothMoves(Move(r.reached, round(r.final_dist_m, 4), r.steps), Move(l.reached, round(l.final_dist_m, 4), l.steps))

    @primitive(acting=True)
    def rotate_wrist(self, yaw: float, arm: Literal["right", "left"] = "right") -> Rotate:
        """Turn the gripper about the vertical axis to an absolute yaw (radians, 0 = start pose).

        Args:
            yaw: target yaw in radians.
            arm: which arm turns its wrist, "right" or "left".
        """
        motion = self._motion(arm)
        if not np.isfinite(float(yaw)):
            raise ValueError("rotate_wrist: yaw must be a finite number")
        reached_yaw, steps = motion.rotate_to(float(yaw))
        err = abs(np.arctan2(np.sin(reached_yaw - yaw), np.cos(reached_yaw - yaw)))
        return Rotate(round(reached_yaw, 4), bool(err < 0.05), steps)

    @primitive(acting=True)
    def set_gripper(self, action: Literal["open", "close"], arm: Literal["right", "left"] = "right") -> Gripper:
        """Open or close the gripper; reports the opening width and whether it holds something.

        Args:
            action: "open" or "close".
            arm: whose gripper, "right" or "left".
        """
        motion = self._motion(arm)
        if action not in ("open", "close"):
            raise ValueError(f"set_gripper: action must be 'open' or 'close', got {action!r}")
        steps = motion.set_gripper(close=action == "close")
        width = self.backend.gripper_width(arm)
        return Gripper(round(width, 4), self._holding(width, arm), steps)

    @primitive(acting=True)
    def release(self, lift_m: float = 0.05, arm: Literal["right", "left"] = "right") -> Gripper:
        """Open the gripper and back straight up by `lift_m` metres.

        Args:
            lift_m: how far to rise after opening (0 to stay).
            arm: whose gripper opens, "right" or "left".
        """
        motion = self._motion(arm)
        if not 0 <= float(lift_m) <= 0.3:
            raise ValueError("release: lift_m must be in 0..0.3")
        steps = motion.set_gripper(close=False)
        if lift_m > 0:
            pos, _ = self.backend.eef_pose(arm)
            steps += motion.move_to(pos + np.array([0, 0, float(lift_m)]), max_steps=80).steps
        width = self.backend.gripper_width(arm)
        return Gripper(round(width, 4), self._holding(width, arm), steps)

    @primitive(acting=True, requires="vla")
    def vla(self, instruction: str, max_steps: int = 400) -> VLAResult:
        """Run the VLA policy on a short instruction until it finishes or max_steps pass.

        Args:
            instruction: what to do, e.g. "pick up the bowl and place it on the plate".
            max_steps: control steps the policy may take (20 per second).
        """
        if not instruction.strip():
            raise ValueError("vla: instruction must not be empty")
        from robots.vla.io import BackendIO

        out = self.vla_policy.run(BackendIO(self), instruction, int(max_steps))
        return VLAResult(self.vla_policy.name, out.success, out.steps, out.stopped_reason)

    # -- helpers ---------------------------------------------------------
    def _holding(self, width: float, arm: str = "right") -> bool:
        return self._motion(arm).gripper_cmd > 0 and width > HOLDING_MIN_WIDTH_M

    def _motion(self, arm: str) -> MotionController:
        """The arm's controller; an arm this robot lacks is a clear ValueError."""
        if arm not in self.motions:
            have = " and ".join(repr(a) for a in self.arms)
            raise ValueError(f"arm {arm!r}: this robot has {'one arm' if len(self.arms) == 1 else 'arms'} {have}")
        return self.motions[arm]

    @classmethod
    def primitive_specs(cls) -> list[PrimitiveSpec]:
        """Every primitive, in definition order."""
        return [m.__primitive__ for m in cls.__dict__.values() if hasattr(m, "__primitive__")]

    def available(self) -> list[PrimitiveSpec]:
        return [s for s in self.primitive_specs() if s.requires is None or s.requires in self.capabilities]

    def call(self, name: str, args: dict[str, Any]):
        """Call a primitive by name with keyword arguments (the tool interface's entry)."""
        names = {s.name for s in self.available()}
        if name not in names:
            raise ValueError(f"unknown primitive {name!r}; available: {', '.join(sorted(names))}")
        return getattr(self, name)(**args)
