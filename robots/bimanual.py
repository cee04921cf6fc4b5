"""Bimanual backend (RoboTwin 2.0's role): robosuite's own two-arm environments, two Panda arms.

RoboTwin 2.0 cannot be installed here (its assets live behind unreachable
hosts), so this group uses the two-arm environments of the robosuite that
LIBERO-PRO already brings (1.4.0), each judged by robosuite's own
`_check_success`.  robosuite 1.4 ships three: TwoArmLift, TwoArmHandover and
TwoArmPegInHole.  PegInHole is left out: its arms carry a peg and a plate
instead of grippers and the task needs a 90-degree wrist pitch, which the
primitive set (gripper pointing down, yaw only) cannot command — a planner
could not solve it by any means, so it would measure nothing.

A *task* is `<Env>/<variant>`: the variant fixes the arm layout (side by
side facing +x, or facing each other across the table), the region and
yaw window the object is sampled from, and for the handover whether the
hammer starts on the table or in the right gripper (and where it is held).
Variant 0 of each env is robosuite's own default setup.  The seed draws the sample inside the variant
(object pose, the hammer's size and mass, the arms' joint noise) through
robosuite's own samplers, so every (task, seed) is a reproducible instance.
`VARIANTS` lists them: 25 per environment, 50 in all, the paper's count of
RoboTwin tasks.

Arms: 'right' is robot0, 'left' is robot1.  `step(action7, arm)` moves one
arm while the other holds its last pose (a proportional hold toward where it
was left, with its last gripper command) — so a grasp does not sag while the
other arm works; `step_arms({arm: action7})` moves both in the same env step
(lifting a pot level needs that).  Camera observations are off; images are
rendered on demand and flipped once, here.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from robots.backend import StepCounter, TaskCard, settle
from robots.libero_pro import configure_robosuite_bridge
from robots.motion import GRIPPER_CLOSE, GRIPPER_OPEN, MAX_ACTION, POS_SCALE, ROT_SCALE, axis_angle
from robots.robosuite_cameras import RobosuiteCameras, apply_fast_render

ENVS = ("TwoArmLift", "TwoArmHandover")
ARMS = ("right", "left")
ROBOT_INDEX = {"right": 0, "left": 1}
CAMERAS = ("frontview", "birdview", "agentview", "sideview", "robot0_eye_in_hand", "robot1_eye_in_hand")
CARD_CAMERAS = ("agentview", "robot0_eye_in_hand", "frontview", "robot1_eye_in_hand", "birdview")
DEFAULT_IMAGE_SIZE = 256
LAYOUTS = {"parallel": "single-arm-parallel", "opposed": "single-arm-opposed"}
LAYOUT_TEXT = {
    "parallel": "The two arms stand side by side at the -x end of the table, facing +x; the right arm is at -y.",
    "opposed": "The two arms face each other across the table; the right arm stands at -y, the left at +y.",
}
#: Env steps the hammer is pinned between the right fingers while they close (in-hand starts).
IN_HAND_CLOSE_STEPS = 12
#: The hold controller's gains: what MotionController uses near a goal.
HOLD_POS_GAIN, HOLD_ROT_GAIN = 2.0, 1.5


@dataclass(frozen=True)
class Variant:
    """One task of the group: an arm layout, where the object starts, and how."""

    env: str
    layout: str
    """'parallel' or 'opposed'."""
    centre: tuple[float, float] = (0.0, 0.0)
    """Offset (x, y) of the object's sampling region from the env's default, metres."""
    half_range: float | None = None
    """Half-width of the square sampling region, metres; None = the env's default region."""
    yaw: tuple[float, float] | None = None
    """Object yaw window (radians); None = the env's default."""
    in_hand: bool = False
    """Handover only: the hammer starts in the right gripper instead of on the table."""
    grip_offset: float = 0.0
    """In-hand starts: where the fingers hold the handle, metres from its centre toward the head."""


#: The pot's handles lie along its local y; yaw pi puts them along world y, one per arm.  The windows
#: stay inside robosuite's default (pi +- 60 deg) so that each arm keeps its own side.
LIFT_YAWS = ((np.pi - np.pi / 3, np.pi + np.pi / 3), (np.pi - np.pi / 12, np.pi + np.pi / 12))
LIFT_CENTRES = ((0.0, 0.0), (0.05, 0.0), (-0.05, 0.0), (0.0, 0.05), (0.0, -0.05), (0.05, 0.05))
HANDOVER_CENTRES = ((0.0, 0.0), (0.06, 0.0), (-0.06, 0.0), (0.0, 0.04), (0.0, -0.04), (0.06, 0.04), (-0.06, -0.04))
HANDOVER_GRIPS = (0.0, 0.02, -0.02, 0.04, -0.04)


def _lift_variants() -> list[Variant]:
    """robosuite's default, then 2 layouts x 6 regions x 2 yaw windows: 25."""
    out = [Variant("TwoArmLift", "parallel")]
    for layout in ("parallel", "opposed"):
        for c in LIFT_CENTRES:
            for yaw in LIFT_YAWS:
                out.append(Variant("TwoArmLift", layout, c, 0.02, yaw))
    return out


def _handover_variants() -> list[Variant]:
    """robosuite's default, 2 layouts x 7 table regions, 2 layouts x 5 in-hand grips: 25."""
    out = [Variant("TwoArmHandover", "parallel")]
    for layout in ("parallel", "opposed"):
        out += [Variant("TwoArmHandover", layout, c, 0.03) for c in HANDOVER_CENTRES]
    for layout in ("parallel", "opposed"):
        out += [Variant("TwoArmHandover", layout, in_hand=True, grip_offset=g) for g in HANDOVER_GRIPS]
    return out


VARIANTS: dict[str, list[Variant]] = {"TwoArmLift": _lift_variants(), "TwoArmHandover": _handover_variants()}

INSTRUCTIONS = {
    "TwoArmLift": "lift the pot off the table with both arms, each gripper holding one of its two handles",
    "TwoArmHandover": "pick up the hammer with the right arm and hand it over to the left arm: "
    "in the end the left gripper holds the hammer by its handle, the right gripper has let go, "
    "and the hammer is in the air",
    "TwoArmHandover/in_hand": "the right gripper holds a hammer: hand it over to the left arm, so that "
    "the left gripper holds it by its handle, the right gripper has let go, and the hammer is in the air",
}
#: Segmentation names: name -> geom-name prefixes (first match wins, so specific parts come first).
OBJECT_GEOMS = {
    # The graspable bar of each handle loop is the "handle"; the loop's side struts belong to the pot.
    "TwoArmLift": {"pot_handle0": ("pot_handle0_c",), "pot_handle1": ("pot_handle1_c",), "pot": ("pot_",)},
    "TwoArmHandover": {"hammer_handle": ("hammer_handle",), "hammer_head": ("hammer_",)},
}


def parse_task_id(task: str) -> tuple[str, int]:
    """'TwoArmLift/3' -> ('TwoArmLift', 3), with a clear error otherwise."""
    from agents.errors import CellbenchError

    env, sep, index = task.partition("/")
    if not sep or not index.isdigit():
        raise CellbenchError(f"task id {task!r} must be 'Env/variant', e.g. TwoArmLift/0")
    if env not in VARIANTS:
        raise CellbenchError(f"task {task!r}: unknown two-arm env {env!r}; known: {', '.join(ENVS)}")
    if not 0 <= int(index) < len(VARIANTS[env]):
        raise CellbenchError(f"task {task!r}: {env} has variants 0..{len(VARIANTS[env]) - 1}")
    return env, int(index)


def variant_of(task: str) -> Variant:
    env, index = parse_task_id(task)
    return VARIANTS[env][index]


def task_instruction(task: str) -> str:
    v = variant_of(task)
    key = f"{v.env}/in_hand" if v.in_hand else v.env
    return f"{INSTRUCTIONS[key]}. {LAYOUT_TEXT[v.layout]}"


def all_task_ids() -> list[str]:
    return [f"{env}/{i}" for env in ENVS for i in range(len(VARIANTS[env]))]


def _instance_seed(task: str, seed: int) -> int:
    return zlib.crc32(f"{task}:{seed}".encode())


class BimanualBackend(RobosuiteCameras):
    """One robosuite two-arm simulator with two Pandas; a fresh env per (task, seed) instance."""

    name = "bimanual"
    arms = ARMS
    cameras = CAMERAS
    #: A hammer held up by the right arm often shows only from above: locate also fuses the birdview.
    locate_cameras = ("agentview", "frontview", "birdview")

    def __init__(self, image_size: int = DEFAULT_IMAGE_SIZE, fast_render: bool = True):
        configure_robosuite_bridge()
        import robosuite.utils.camera_utils  # noqa: F401  (its first import warns; keep that out of a cell)

        self.image_size = image_size
        self.fast_render = fast_render
        self.counter = StepCounter()
        self._env = None
        self._task: str | None = None
        self._variant: Variant | None = None
        self._seg_lut: np.ndarray | None = None
        self._seg_names: dict[int, str] = {}
        self._hold: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._grip: dict[str, float] = {}

    # -- lifecycle -------------------------------------------------------
    def reset(self, task: str, seed: int) -> TaskCard:
        env_name, index = parse_task_id(task)
        v = VARIANTS[env_name][index]
        # robosuite samples object poses, hammer sizes and joint noise from NumPy's global generator,
        # some of it while building the model: seed it before both.
        np.random.seed(_instance_seed(task, seed))
        self.close()
        self._env = self._make_env(v)
        self._env.reset()
        self._task, self._variant = task, v
        self._grip = {arm: GRIPPER_OPEN for arm in ARMS}
        if v.in_hand:
            self._grip["right"] = GRIPPER_CLOSE  # the hammer starts in the right gripper: keep it closed
        self._hold = {arm: self.eef_pose(arm) for arm in ARMS}
        if v.in_hand:
            self._put_hammer_in_right_hand(v.grip_offset)
        self.settle_steps = settle(lambda: self.step_arms({}), self.sim)
        objects = tuple(OBJECT_GEOMS[env_name])
        self._build_segmentation_lut(env_name)
        return TaskCard(
            benchmark="bimanual",
            suite=env_name,
            task=task,
            task_index=index,
            seed=seed,
            instruction=task_instruction(task),
            objects=objects,
            cameras=CARD_CAMERAS,
            arms=ARMS,
        )

    def _put_hammer_in_right_hand(self, grip_offset: float) -> None:
        """Start the hammer in the right gripper, lying flat with its handle across the fingers.

        robosuite's own in-hand start (`prehensile=False`) drops the hammer with two Pandas
        here: its orientation formula lays the handle along the fingers' closing axis, so
        they close on nothing.  The env is therefore built with the hammer on the table, and
        here it is turned about the vertical (a yaw, keeping the seed's pose otherwise) until
        the handle crosses the closing axis, moved so that the handle point `grip_offset`
        metres from its centre toward the head sits between the fingertips, and pinned there
        while the fingers close.
        """
        import robosuite.utils.transform_utils as T

        env, sim = self._env, self.sim
        joint = env.hammer.joints[0]
        qpos = np.array(sim.data.get_joint_qpos(joint), dtype=float)
        body_pos, body_quat_wxyz = qpos[:3], qpos[3:]
        handle = self._true_geom_position("hammer_handle")
        head = self._true_geom_position("hammer_head")
        fingers = [sim.data.body_xpos[sim.model.body_name2id(f"gripper0_{f}")] for f in ("leftfinger", "rightfinger")]
        closing = fingers[1] - fingers[0]
        want = np.arctan2(closing[1], closing[0]) + np.pi / 2
        have = np.arctan2(*(handle - head)[1::-1])
        turn = (want - have + np.pi / 2) % np.pi - np.pi / 2  # either way along the axis: the smaller turn
        Rz = T.euler2mat([0.0, 0.0, turn])
        site, _ = self.eef_pose("right")
        axis = (head - handle) / np.linalg.norm(head - handle)
        grip = handle + grip_offset * axis
        new_pos = site + Rz @ (body_pos - grip)
        new_quat_xyzw = T.quat_multiply(T.mat2quat(Rz), T.convert_quat(body_quat_wxyz, to="xyzw"))
        pinned = np.concatenate([new_pos, T.convert_quat(new_quat_xyzw, to="wxyz")])
        for _ in range(IN_HAND_CLOSE_STEPS):
            sim.data.set_joint_qpos(joint, pinned)
            sim.data.set_joint_qvel(joint, np.zeros(6))
            self.step_arms({})

    def _make_env(self, v: Variant):
        import robosuite as suite
        from robosuite.controllers import load_controller_config
        from robosuite.utils.placement_samplers import UniformRandomSampler

        kwargs: dict[str, Any] = {}
        if v.env == "TwoArmHandover":
            # Always built with the hammer on the table; in-hand starts are set up after the reset.
            kwargs["prehensile"] = True
            table = np.array([0.0, 1.2 * (-3 / 8), 0.8])  # TwoArmHandover's table_offset
            default_rot, axis, default_xy = None, "y", (0.1, 0.05)
        else:
            table = np.array([0.0, 0.0, 0.8])
            default_rot, axis, default_xy = (np.pi - np.pi / 3, np.pi + np.pi / 3), "z", (0.03, 0.03)
        if v.half_range is not None or v.yaw is not None:
            # The env's own sampler with this variant's region and yaw window (defaults from its source).
            cx, cy = v.centre
            hx, hy = (v.half_range, v.half_range) if v.half_range is not None else default_xy
            kwargs["placement_initializer"] = UniformRandomSampler(
                name="ObjectSampler",
                x_range=[cx - hx, cx + hx],
                y_range=[cy - hy, cy + hy],
                rotation=v.yaw if v.yaw is not None else default_rot,
                rotation_axis=axis,
                ensure_object_boundary_in_range=False,
                ensure_valid_placement=True,
                reference_pos=table,
            )
        env = suite.make(
            v.env,
            robots=["Panda", "Panda"],
            env_configuration=LAYOUTS[v.layout],
            controller_configs=load_controller_config(default_controller="OSC_POSE"),
            has_renderer=False,
            has_offscreen_renderer=True,
            use_camera_obs=False,
            use_object_obs=False,
            ignore_done=True,
            hard_reset=False,  # a hard reset rebuilds the GL context (~1 s)
            horizon=100_000,
            camera_heights=self.image_size,
            camera_widths=self.image_size,
            **kwargs,
        )
        if self.fast_render:
            apply_fast_render(env.sim)
        return env

    def close(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            except Exception:
                pass
            self._env = None

    # -- stepping and state ---------------------------------------------
    @property
    def sim(self):
        return self._env.sim

    @staticmethod
    def _check_arm(arm: str) -> int:
        if arm not in ROBOT_INDEX:
            raise ValueError(f"arm {arm!r}: this robot's arms are 'right' and 'left'")
        return ROBOT_INDEX[arm]

    def _hold_action(self, arm: str) -> np.ndarray:
        """Proportional action back to where the arm was left, with its last gripper command."""
        target, R_goal = self._hold[arm]
        pos, R = self.eef_pose(arm)
        a_pos = np.clip((target - pos) / POS_SCALE * HOLD_POS_GAIN, -MAX_ACTION, MAX_ACTION)
        a_rot = np.clip(axis_angle(R_goal @ R.T) / ROT_SCALE * HOLD_ROT_GAIN, -0.5, 0.5)
        return np.concatenate([a_pos, a_rot, [self._grip[arm]]])

    def step(self, action: np.ndarray, arm: str = "right") -> None:
        """One env step moving `arm` with a 7-D delta OSC_POSE action; the other arm holds."""
        self._check_arm(arm)
        self.step_arms({arm: action})

    def step_arms(self, actions: dict[str, np.ndarray]) -> None:
        """One env step with a 7-D action per arm given; arms not given hold their pose and grip."""
        for arm in actions:
            self._check_arm(arm)
        full = []
        for arm in ARMS:
            if arm in actions:
                a = np.asarray(actions[arm], dtype=np.float64).reshape(7)
                self._grip[arm] = GRIPPER_CLOSE if a[6] > 0 else GRIPPER_OPEN
            else:
                a = self._hold_action(arm)
            full.append(a)
        self._env.step(np.concatenate(full))
        self.counter.sim_steps += 1
        for arm in actions:
            self._hold[arm] = self.eef_pose(arm)

    def gripper_command_at_reset(self, arm: str = "right") -> float:
        """The gripper command an arm starts with (closed when it starts holding the hammer)."""
        self._check_arm(arm)
        return self._grip.get(arm, GRIPPER_OPEN)

    def success(self) -> bool:
        return bool(self._env._check_success())

    def eef_pose(self, arm: str = "right") -> tuple[np.ndarray, np.ndarray]:
        i = self._check_arm(arm)
        sim = self.sim
        sid = sim.model.site_name2id(f"gripper{i}_grip_site")
        return sim.data.site_xpos[sid].copy(), sim.data.site_xmat[sid].reshape(3, 3).copy()

    def gripper_qpos(self, arm: str = "right") -> np.ndarray:
        robot = self._env.robots[self._check_arm(arm)]
        return np.array([self.sim.data.qpos[i] for i in robot._ref_gripper_joint_pos_indexes])

    def gripper_width(self, arm: str = "right") -> float:
        q = self.gripper_qpos(arm)
        return float(abs(q[0] - q[1]))

    # -- rendering (RobosuiteCameras) and segmentation --------------------
    def _build_segmentation_lut(self, env_name: str) -> None:
        """geom id -> index of the named object part it belongs to (by geom-name prefix), else -1."""
        import mujoco

        model = self.sim.model._model
        parts = OBJECT_GEOMS[env_name]
        names = list(parts)
        lut = np.full(model.ngeom, -1, dtype=np.int32)
        for g in range(model.ngeom):
            gname = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or ""
            for i, name in enumerate(names):
                if gname.startswith(parts[name]):
                    lut[g] = i
                    break
        self._seg_lut = lut
        self._seg_names = dict(enumerate(names))

    def segmentation_names(self) -> dict[int, str]:
        return dict(self._seg_names)

    def info(self) -> dict[str, Any]:
        v = self._variant
        return {
            "backend": self.name,
            "task": self._task,
            "env": v.env if v else None,
            "layout": v.layout if v else None,
            "in_hand": v.in_hand if v else None,
            "sim_steps": self.counter.sim_steps,
        }

    # -- ground truth, for tests and benchmarks only ---------------------
    def _true_geom_position(self, geom: str) -> np.ndarray:
        """The simulator's position of one geom. Never used by primitives or planners."""
        return self.sim.data.geom_xpos[self.sim.model.geom_name2id(geom)].copy()
