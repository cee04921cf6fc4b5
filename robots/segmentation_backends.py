"""The segmentation seam behind the `locate` / `segment` primitives.

A `SegmentationBackend` turns an RGB image and a text prompt ("red bowl") into
zero or more instance masks, each with a confidence score. Two backends exist:

* ``sim`` (default) — `robots.perception.SimSegmentation`: the simulator's own
  per-pixel object ids, looked up rather than inferred, so it is exact and
  needs no model. It reads its masks from the simulator named in `context`.
* ``sam3`` — `Sam3Segmentation`: Meta's SAM 3 (Segment Anything with
  Concepts), open-vocabulary text-prompted instance segmentation. Optional:
  ``pip install 'cellbench[sam3]'``, a CUDA GPU, and SAM 3 weights the user
  supplies (the Hugging Face repo ``facebook/sam3`` is gated, so cellbench
  never downloads them) via ``CELLBENCH_SAM3_CHECKPOINT``.

`get_segmentation_backend(name, **kw)` picks one by its config name.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

SAM3_CHECKPOINT_ENV = "CELLBENCH_SAM3_CHECKPOINT"
KNOWN_BACKENDS = ("sim", "sam3")


@dataclass(frozen=True)
class SegmentMask:
    mask: np.ndarray
    """(H, W) bool, the size of the image it was segmented from."""
    score: float
    """Confidence in [0, 1]; the sim backend reports 1.0 for a found object."""
    label: str = ""
    """What the mask is of, where the backend knows (the sim backend: the object's name)."""


class SegmentationBackend(Protocol):
    name: str
    needs_rgb: bool
    """Whether `segment` looks at the pixels; when False the caller passes `rgb=None` and renders no frame."""

    def segment(self, rgb: np.ndarray | None, prompt: str, context: Any = None) -> list[SegmentMask]:
        """Instances matching `prompt` in `rgb` ((H, W, 3) uint8, upright), best score first.

        Returns an empty list when nothing matches. `context` is whatever the
        backend needs beyond pixels — for ``sim`` the camera and image size to
        read the simulator's ids from (it needs no pixels: `rgb` is None);
        image-only backends such as ``sam3`` ignore it.
        """
        ...


class Sam3Unavailable(ImportError):
    """The optional SAM 3 extra is not installed."""


SAM3_MISSING = (
    "segmentation backend 'sam3' needs the optional extra: pip install 'cellbench[sam3]' "
    f"(and a GPU plus SAM 3 weights you supply via {SAM3_CHECKPOINT_ENV})"
)


def get_segmentation_backend(name: str, **kw: Any) -> SegmentationBackend:
    """The backend called `name` ('sim' or 'sam3'), constructed with `kw`."""
    if name == "sim":
        # Imported here so that choosing sam3 never pulls in the simulator stack.
        from robots.perception import SimSegmentation

        return SimSegmentation(**kw)
    if name == "sam3":
        return Sam3Segmentation(**kw)
    raise ValueError(f"unknown segmentation backend {name!r}; known backends: {', '.join(KNOWN_BACKENDS)}")


class Sam3Segmentation:
    """SAM 3 text-prompted instance segmentation (facebookresearch/sam3).

    The call path follows the image example of the SAM 3 README::

        from sam3.model_builder import build_sam3_image_model
        from sam3.model.sam3_image_processor import Sam3Processor
        model = build_sam3_image_model(checkpoint_path=..., load_from_HF=False)
        processor = Sam3Processor(model, confidence_threshold=0.5)
        state = processor.set_image(pil_image)
        out = processor.set_text_prompt(state=state, prompt="red bowl")
        out["masks"], out["boxes"], out["scores"]  # (N,1,H,W) bool, (N,4) xyxy px, (N,)

    It has not been run inside cellbench (no weights here); the tests only
    cover the missing-extra error. Construction checks the extra, the weights
    and the device, so a misconfiguration fails when the episode is set up;
    the ~0.9B-parameter model loads on the first `segment` call.

    `checkpoint` defaults to ``$CELLBENCH_SAM3_CHECKPOINT`` (the ``sam3.pt``
    file from ``facebook/sam3``). Some sam3 installs lack the BPE vocabulary
    file the text encoder needs; pass `bpe_path` then.
    """

    name = "sam3"
    needs_rgb = True

    def __init__(
        self,
        checkpoint: str | os.PathLike[str] | None = None,
        device: str = "cuda",
        confidence_threshold: float = 0.5,
        bpe_path: str | None = None,
    ) -> None:
        self._torch, self._build_model, self._processor_cls = _import_sam3()
        checkpoint = checkpoint or os.environ.get(SAM3_CHECKPOINT_ENV)
        if not checkpoint or not os.path.isfile(checkpoint):
            raise FileNotFoundError(
                f"segmentation backend 'sam3' needs SAM 3 weights: set {SAM3_CHECKPOINT_ENV} to the "
                f"sam3.pt checkpoint (from the gated Hugging Face repo facebook/sam3); got {checkpoint!r}"
            )
        if device.startswith("cuda") and not self._torch.cuda.is_available():
            raise RuntimeError(f"segmentation backend 'sam3' asked for device {device!r} but torch sees no CUDA GPU")
        self.checkpoint = os.fspath(checkpoint)
        self.device = device
        self.confidence_threshold = confidence_threshold
        self.bpe_path = bpe_path
        self._processor: Any = None

    def segment(self, rgb: np.ndarray, prompt: str, context: Any = None) -> list[SegmentMask]:
        from PIL import Image

        processor = self._load()
        with self._torch.inference_mode():
            state = processor.set_image(Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)))
            out = processor.set_text_prompt(state=state, prompt=prompt)
        scores = out["scores"].float().cpu().numpy().reshape(-1)
        masks = out["masks"].cpu().numpy().astype(bool).reshape(len(scores), *rgb.shape[:2])
        order = np.argsort(-scores, kind="stable")
        return [SegmentMask(mask=masks[i], score=float(scores[i]), label=prompt) for i in order]

    def _load(self) -> Any:
        if self._processor is None:
            kw = {"bpe_path": self.bpe_path} if self.bpe_path else {}
            model = self._build_model(
                checkpoint_path=self.checkpoint, load_from_HF=False, device=self.device, **kw
            )
            self._processor = self._processor_cls(model, confidence_threshold=self.confidence_threshold)
        return self._processor


def _import_sam3() -> tuple[Any, Any, Any]:
    try:
        import torch
        from sam3.model.sam3_image_processor import Sam3Processor
        from sam3.model_builder import build_sam3_image_model
    except ImportError as e:
        raise Sam3Unavailable(SAM3_MISSING) from e
    return torch, build_sam3_image_model, Sam3Processor
