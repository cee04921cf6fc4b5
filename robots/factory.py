"""Build a backend and a Robot for one episode from a plain spec dict (what the runtime child receives)."""
from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from agents.errors import CellbenchError

BENCHMARKS = ("libero_pro", "bimanual", "kitchen_atomic", "kitchen_composite")
#: Groups whose robot has two arms: the `arm` argument and `move_both` are in their API.
TWO_ARM_BENCHMARKS = ("bimanual",)


def make_backend(benchmark: str, image_size: int = 256):
    # The kitchen groups (RoboCasa365's roles) are LIBERO-90/10 scenes: the same backend, another task filter.
    if benchmark in ("libero_pro", "kitchen_atomic", "kitchen_composite"):
        from robots.libero_pro import LiberoProBackend

        return LiberoProBackend(image_size=image_size, group=benchmark)
    if benchmark == "bimanual":  # RoboTwin 2.0's role: robosuite's own two-arm envs
        from robots.bimanual import BimanualBackend

        return BimanualBackend(image_size=image_size)
    raise CellbenchError(f"unknown benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")


def check_task(benchmark: str, task: str) -> None:
    """Raise CellbenchError naming the task unless it exists in the benchmark group; builds no scene."""
    if benchmark not in BENCHMARKS:
        raise CellbenchError(f"unknown benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
    if benchmark == "bimanual":
        from robots.bimanual import parse_task_id as parse_bimanual_task

        parse_bimanual_task(task)  # raises naming the env or variant
        return
    from robots.libero_pro import _benchmark, check_group, parse_task_id

    suite, index = parse_task_id(task)
    n_tasks = _benchmark(suite).n_tasks  # an unknown suite raises here
    if not 0 <= index < n_tasks:
        raise CellbenchError(f"task {task!r}: suite {suite} has tasks 0..{n_tasks - 1}")
    check_group(benchmark, suite, index)


def make_vla(spec: dict[str, Any]):
    name = spec.get("vla", "scripted")
    if name == "scripted" and spec.get("benchmark") == "bimanual":
        from robots.vla.scripted_bimanual import ScriptedBimanualVLA

        return ScriptedBimanualVLA.from_spec(spec)
    if name == "scripted":
        from robots.vla.scripted import ScriptedVLA

        return ScriptedVLA.from_spec(spec)  # luck keyed on the instance and repeat: robots/vla/scripted.py
    if name == "openpi":
        from robots.vla.openpi_policy import OpenPiPolicy

        # Two-arm groups speak openpi's two-arm (ALOHA-style, 14-D) convention; see robots/vla/io.py.
        convention = "aloha" if spec.get("benchmark") in TWO_ARM_BENCHMARKS else "libero"
        return OpenPiPolicy(host=spec.get("openpi_host", "127.0.0.1"), port=int(spec.get("openpi_port", 8000)),
                            convention=convention)
    raise CellbenchError(f"unknown VLA backend {name!r}; known: scripted, openpi")


def make_robot(spec: dict[str, Any]):
    """-> (Robot, task card dict). spec keys: benchmark, task, seed, capabilities, guides, image_size, vla..."""
    from robots.robot import Robot

    backend = make_backend(spec["benchmark"], int(spec.get("image_size", 256)))
    card = backend.reset(spec["task"], int(spec["seed"]))
    if spec.get("guides", True):
        from robots.guides import load_guide

        card = replace(card, guide=load_guide(spec["benchmark"]))
    caps = tuple(spec.get("capabilities", ("vla",)))
    vla = make_vla(spec) if "vla" in caps else None
    segmentation = None
    if spec.get("segmentation", "sim") != "sim":
        from robots.segmentation_backends import get_segmentation_backend

        segmentation = get_segmentation_backend(spec["segmentation"])
    robot = Robot(backend, capabilities=caps, vla_policy=vla, segmentation=segmentation,
                  show_size=int(spec.get("image_size", 256)))
    return robot, asdict(card)
