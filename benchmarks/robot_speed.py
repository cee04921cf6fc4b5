"""How fast the LIBERO-PRO backend steps and renders, against raw MuJoCo, from one run.

    .venv/bin/python benchmarks/robot_speed.py [--task libero_spatial_swap/0] [--steps 200] [--frames 10] [--json out.json]
    .venv/bin/python benchmarks/robot_speed.py --primitives-only   # just the robo.depth / robo.segment table

Prints:
* env steps/s of `LiberoProBackend.step` (robosuite's controller plus
  `control_freq` physics substeps per env step) against `mujoco.mj_step`/s
  on the same model and a copy of the same state, per env step and per
  physics substep, and their ratio (robosuite + controller overhead);
* ms per frame for each render kind (rgb, depth, segmentation, seg+depth) at
  128 and 256 px from the agentview camera, with fast_render on (shadows,
  reflections and offscreen multisampling off) and off (a second backend),
  and the off/on ratio;
* ms per call of the `robo.depth` and `robo.segment` primitives (256 px,
  fast_render) against the paths they used to take: depth read back with
  an RGB frame (`sim.render(depth=True)`), and segment rendering an RGB
  frame for the `sim` backend, which never looks at it; and the old/new ratio.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from robots.libero_pro import LiberoProBackend  # noqa: E402

KINDS = ("rgb", "depth", "segmentation", "seg+depth")
SIZES = (128, 256)
CAMERA = "agentview"


def time_env_steps(backend: LiberoProBackend, n: int) -> float:
    """Seconds per env step with a gentle sweeping action (so contacts and the controller do real work)."""
    t = time.perf_counter()
    for i in range(n):
        a = np.zeros(7)
        a[1] = 0.3 * np.sin(i / 15)
        a[6] = -1.0
        backend.step(a)
    return (time.perf_counter() - t) / n


def time_raw_mj_steps(backend: LiberoProBackend, n: int) -> float:
    """Seconds per `mujoco.mj_step` on the env's model and a copy of its current state."""
    import mujoco

    model = backend.sim.model._model
    data = copy.deepcopy(backend.sim.data._data)
    mujoco.mj_step(model, data)
    t = time.perf_counter()
    for _ in range(n):
        mujoco.mj_step(model, data)
    return (time.perf_counter() - t) / n


def substeps_per_env_step(backend: LiberoProBackend) -> int:
    inner = backend._env.env
    return int(round(inner.control_timestep / inner.model_timestep))


def time_calls(fn, frames: int) -> float:
    """Milliseconds per call, after two warm-up calls (GL buffers are sized on first use)."""
    fn()
    fn()
    t = time.perf_counter()
    for _ in range(frames):
        fn()
    return (time.perf_counter() - t) / frames * 1000


def time_render(backend: LiberoProBackend, kind: str, size: int, frames: int) -> float:
    """Milliseconds per frame of one render kind."""
    def once():
        if kind == "seg+depth":
            backend.render_depth_and_segmentation(CAMERA, size)
        else:
            backend.render(CAMERA, kind, size)

    return time_calls(once, frames)


def _old_depth(backend: LiberoProBackend, camera: str, size: int) -> np.ndarray:
    """The depth primitive's former path: depth read back together with a full RGB frame."""
    from robosuite.utils.camera_utils import get_real_depth_map

    _, depth = backend.sim.render(camera_name=camera, width=size, height=size, depth=True)
    return np.ascontiguousarray(get_real_depth_map(backend.sim, depth[::-1]))


def _old_segment(robot, prompt: str, camera: str):
    """The segment primitive's former path for the sim backend: an RGB frame it ignores, then the mask."""
    rgb = robot.backend.render(camera, "rgb", robot.show_size)
    return robot.segmentation.segment(rgb, prompt, (camera, robot.show_size))


def time_primitives(backend: LiberoProBackend, frames: int) -> dict:
    """ms/call of robo.depth and robo.segment now and along their former paths (256 px, CAMERA)."""
    from robots.robot import Robot

    robot = Robot(backend, capabilities=())
    prompt = backend.segmentation_names()[0]
    return {
        "size": robot.show_size,
        "depth_old_ms": time_calls(lambda: _old_depth(backend, CAMERA, robot.show_size), frames),
        "depth_new_ms": time_calls(lambda: robot.depth(CAMERA), frames),
        "segment_old_ms": time_calls(lambda: _old_segment(robot, prompt, CAMERA), frames),
        "segment_new_ms": time_calls(lambda: robot.segment(prompt, CAMERA), frames),
    }


def print_primitives(p: dict, frames: int) -> None:
    print(f"primitive ms/call ({CAMERA}, {p['size']} px, fast_render, {frames} calls)   old path   now   old/now")
    for name, old in (("depth", "depth read with an RGB frame"), ("segment", "RGB frame + sim mask")):
        o, n = p[f"{name}_old_ms"], p[f"{name}_new_ms"]
        print(f"  robo.{name:8s} (old: {old:28s}) {o:8.1f}   {n:6.1f}   {o / n:6.2f}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="libero_spatial_swap/0")
    ap.add_argument("--steps", type=int, default=200, help="env steps to time")
    ap.add_argument("--mj-steps", type=int, default=5000, help="raw mj_step calls to time")
    ap.add_argument("--frames", type=int, default=10, help="frames per render kind and size")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--primitives-only", action="store_true",
                    help="only time robo.depth and robo.segment against their former paths")
    args = ap.parse_args(argv)

    if args.primitives_only:
        backend = LiberoProBackend(fast_render=True)
        backend.reset(args.task, 0)
        p = time_primitives(backend, args.frames)
        backend.close()
        print(f"task {args.task}  MUJOCO_GL={os.environ.get('MUJOCO_GL')}  ({os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.2f})")
        print_primitives(p, args.frames)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"task": args.task, "primitive_ms": p}, fh, indent=2)
        return 0

    t = time.perf_counter()
    fast = LiberoProBackend(fast_render=True)
    fast.reset(args.task, 0)
    out: dict = {"task": args.task, "machine": platform.processor() or platform.machine(),
                 "mujoco_gl": os.environ.get("MUJOCO_GL"), "cpus": os.cpu_count(),
                 "load_avg_1min": round(os.getloadavg()[0], 2),
                 "make_and_reset_s": round(time.perf_counter() - t, 2)}

    env_s = time_env_steps(fast, args.steps)
    raw_s = time_raw_mj_steps(fast, args.mj_steps)
    sub = substeps_per_env_step(fast)
    out["stepping"] = {
        "substeps_per_env_step": sub,
        "env_steps_per_s": 1 / env_s,
        "env_step_ms": env_s * 1000,
        "env_physics_substeps_per_s": sub / env_s,
        "raw_mj_steps_per_s": 1 / raw_s,
        "raw_env_step_equivalent_per_s": 1 / (raw_s * sub),
        "env_over_raw_time_per_substep": env_s / sub / raw_s,
    }

    t = time.perf_counter()
    slow = LiberoProBackend(fast_render=False)
    slow.reset(args.task, 0)
    out["make_and_reset_slow_s"] = round(time.perf_counter() - t, 2)
    renders: dict = {}
    for label, backend in (("fast_render", fast), ("default_render", slow)):
        for size in SIZES:
            for kind in KINDS:
                renders[f"{label}/{kind}/{size}"] = time_render(backend, kind, size, args.frames)
    out["render_ms"] = renders
    out["primitive_ms"] = time_primitives(fast, args.frames)
    fast.close()
    slow.close()

    st = out["stepping"]
    print(f"task {args.task}  MUJOCO_GL={out['mujoco_gl']}  make+reset {out['make_and_reset_s']} s  "
          f"({out['cpus']} CPUs, load {out['load_avg_1min']} at start)")
    print(f"env step      {st['env_steps_per_s']:8.1f} steps/s  ({st['env_step_ms']:.2f} ms; "
          f"{sub} physics substeps each -> {st['env_physics_substeps_per_s']:.0f} substeps/s)")
    print(f"raw mj_step   {st['raw_mj_steps_per_s']:8.0f} steps/s  (= {st['raw_env_step_equivalent_per_s']:.1f} env-step equivalents/s)")
    print(f"ratio         env step costs {st['env_over_raw_time_per_substep']:.2f}x raw physics per substep "
          f"(robosuite controller + Python overhead)")
    print()
    print(f"render ms/frame ({CAMERA}, {args.frames} frames)   fast_render   default   default/fast")
    for size in SIZES:
        for kind in KINDS:
            f, d = renders[f"fast_render/{kind}/{size}"], renders[f"default_render/{kind}/{size}"]
            print(f"  {kind:13s} {size:4d}px            {f:8.1f}   {d:8.1f}   {d / f:6.2f}x")
    print()
    print_primitives(out["primitive_ms"], args.frames)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
