"""The cheaper LIBERO-PRO build (robots/scene_cache.py) starts every episode where a fresh full build does.

Three real builds of one instance: the original (full-size textures,
compiled afresh), a capped one that compiles and stores its model (the first
episode of a task), and one that loads the stored model (every later
episode; compiling is forbidden there).  After reset, init state and
settling, the simulator state is compared bit for bit across all three; the
stored model must equal the compiled one in every array, and differ from the
full-size one only in its textures; images must be the same picture.
"""
from __future__ import annotations

import numpy as np
import pytest

from robots.libero_pro import LiberoProBackend

TASK, SEED = "libero_spatial_swap/0", 0
CAMERAS = ("agentview", "robot0_eye_in_hand", "frontview")
STATE = ("time", "qpos", "qvel", "act", "ctrl", "qacc", "qacc_warmstart", "mocap_pos", "mocap_quat", "xpos", "xquat",
         "sensordata", "qfrc_applied", "xfrc_applied")


def _model_arrays(model) -> dict[str, np.ndarray]:
    out = {}
    for name in dir(model):
        if name.startswith("_"):
            continue
        value = getattr(model, name)
        if isinstance(value, np.ndarray):
            out[name] = value.copy()
    return out


def _snapshot(**kw) -> dict:
    backend = LiberoProBackend(**kw)
    try:
        card = backend.reset(TASK, SEED)
        data = backend.sim.data._data
        return {
            "card": card,
            "settle_steps": backend.settle_steps,
            "state": {k: np.array(getattr(data, k)).copy() for k in STATE},
            "model": _model_arrays(backend.sim.model._model),
            "images": {c: backend.render(c, "rgb", 256) for c in CAMERAS},
        }
    finally:
        backend.close()


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    import mujoco

    mp = pytest.MonkeyPatch()
    mp.setenv("CELLBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
    try:
        full = _snapshot(full_textures=True, reuse_model=False)
        stored = _snapshot()
        compile_ = mujoco.MjModel.from_xml_string

        def no_compile(*a, **kw):
            raise AssertionError("compiled although the model was stored")

        mp.setattr(mujoco.MjModel, "from_xml_string", no_compile)
        loaded = _snapshot()
        mp.setattr(mujoco.MjModel, "from_xml_string", compile_)
    finally:
        mp.undo()
    return full, stored, loaded


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_a_loaded_model_is_the_compiled_one_bit_for_bit(builds):
    _, stored, loaded = builds
    differ = [k for k in stored["model"] if not _same_bits(stored["model"][k], loaded["model"][k])]
    assert differ == []
    assert stored["settle_steps"] == loaded["settle_steps"]
    for k in STATE:
        assert _same_bits(stored["state"][k], loaded["state"][k]), k
    for c in CAMERAS:
        assert _same_bits(stored["images"][c], loaded["images"][c]), c
    assert stored["card"] == loaded["card"]


def test_capped_textures_change_no_physics_and_the_same_picture(builds):
    full, _, loaded = builds
    differ = {k for k in full["model"] if not _same_bits(full["model"][k], loaded["model"][k])}
    assert differ and all(k.startswith("tex_") or k == "paths" for k in differ), sorted(differ)
    assert loaded["model"]["tex_data"].nbytes < full["model"]["tex_data"].nbytes / 4
    assert full["settle_steps"] == loaded["settle_steps"]
    for k in STATE:
        assert _same_bits(full["state"][k], loaded["state"][k]), k
    assert full["card"] == loaded["card"]
    for c in CAMERAS:
        d = np.abs(full["images"][c].astype(int) - loaded["images"][c].astype(int))
        assert d.max() <= 4 and d.mean() < 0.5, (c, d.max(), d.mean())
