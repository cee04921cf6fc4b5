"""The optional SAM 3 segmentation backend: clear errors when its extra or weights are missing.

sam3 is not installed in the test environment, but a developer machine may
have it, so every test forces the state it needs through `sys.modules`.
"""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from robots.segmentation_backends import (
    SAM3_CHECKPOINT_ENV,
    Sam3Segmentation,
    Sam3Unavailable,
    SegmentMask,
    get_segmentation_backend,
)

SAM3_MODULES = ("sam3", "sam3.model", "sam3.model_builder", "sam3.model.sam3_image_processor")


def test_missing_sam3_names_the_extra(monkeypatch):
    for mod in SAM3_MODULES:
        monkeypatch.setitem(sys.modules, mod, None)  # None in sys.modules makes `import` fail
    with pytest.raises(Sam3Unavailable) as exc:
        get_segmentation_backend("sam3")
    assert isinstance(exc.value, ImportError)
    msg = str(exc.value)
    assert "pip install 'cellbench[sam3]'" in msg
    assert SAM3_CHECKPOINT_ENV in msg and "GPU" in msg


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(ValueError, match=r"'sam2'.*sim, sam3"):
        get_segmentation_backend("sam2")


class _T:
    """Just enough of a torch tensor for the backend's output conversion."""

    def __init__(self, a):
        self.a = np.asarray(a)

    def float(self):
        return _T(self.a.astype(np.float32))

    def cpu(self):
        return self

    def numpy(self):
        return self.a


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def fake_sam3(monkeypatch):
    """Stub torch and sam3 modules answering like the SAM 3 README's image example."""
    calls = {}
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    torch.inference_mode = lambda: _NullContext()

    def build_sam3_image_model(**kw):
        calls["build"] = kw
        return "model"

    class Sam3Processor:
        def __init__(self, model, confidence_threshold=0.5):
            calls["processor"] = (model, confidence_threshold)

        def set_image(self, image):
            return {"size": image.size}

        def set_text_prompt(self, state, prompt):
            w, h = state["size"]
            masks = np.zeros((2, 1, h, w), dtype=bool)
            masks[0, 0, :2] = True
            masks[1, 0, 2:] = True
            return {"masks": _T(masks), "boxes": _T(np.zeros((2, 4))), "scores": _T([0.6, 0.9])}

    builder = types.ModuleType("sam3.model_builder")
    builder.build_sam3_image_model = build_sam3_image_model
    proc = types.ModuleType("sam3.model.sam3_image_processor")
    proc.Sam3Processor = Sam3Processor
    for name, mod in [("torch", torch), ("sam3", types.ModuleType("sam3")),
                      ("sam3.model", types.ModuleType("sam3.model")),
                      ("sam3.model_builder", builder), ("sam3.model.sam3_image_processor", proc)]:
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


def test_missing_weights_name_the_env_var(fake_sam3, monkeypatch):
    monkeypatch.delenv(SAM3_CHECKPOINT_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match=SAM3_CHECKPOINT_ENV):
        get_segmentation_backend("sam3", device="cpu")


def test_sam3_outputs_become_masks_best_first(fake_sam3, monkeypatch, tmp_path):
    # Checks cellbench's glue against the documented output shapes, not SAM 3 itself.
    ckpt = tmp_path / "sam3.pt"
    ckpt.write_bytes(b"")
    monkeypatch.setenv(SAM3_CHECKPOINT_ENV, str(ckpt))
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        Sam3Segmentation()  # default device is cuda; the stub torch has none

    seg = get_segmentation_backend("sam3", device="cpu", confidence_threshold=0.3)
    out = seg.segment(np.zeros((4, 6, 3), dtype=np.uint8), "red bowl")
    assert fake_sam3["build"] == {"checkpoint_path": str(ckpt), "load_from_HF": False, "device": "cpu"}
    assert fake_sam3["processor"] == ("model", 0.3)
    assert [m.score for m in out] == pytest.approx([0.9, 0.6])
    assert all(isinstance(m, SegmentMask) and m.mask.shape == (4, 6) and m.mask.dtype == bool for m in out)
    assert out[0].mask[2:].all() and not out[0].mask[:2].any()
    assert out[0].label == "red bowl"
