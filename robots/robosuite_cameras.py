"""On-demand camera rendering for backends over a robosuite `MjSim` (LIBERO-PRO, the two-arm envs).

One place for what every robosuite scene here needs: RGB, metric depth and
per-pixel object ids rendered only when asked (camera observations stay off
during stepping), flipped upright once (MuJoCo's OpenGL rows run bottom-up),
segmentation mapped geom -> scene object through the backend's lookup table,
and the pinhole model perception needs.  Software GL (llvmpipe) makes RGB the
expensive part; `apply_fast_render` turns off shadows and reflections, which
cost most of it (measured ~3x on LIBERO scenes).
"""
from __future__ import annotations

import numpy as np

from robots.backend import CameraMeta, RenderKind


def apply_fast_render(sim) -> None:
    import mujoco

    sim.model._model.vis.quality.offsamples = 0
    ctx = sim._render_context_offscreen
    if ctx is not None:
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0


class RobosuiteCameras:
    """Mixin: needs `sim`, `cameras`, `image_size`, `counter` and `_seg_lut` (geom id -> object index or -1)."""

    cameras: tuple[str, ...] = ()

    def _check_camera(self, camera: str) -> None:
        if camera not in self.cameras:
            raise ValueError(f"camera {camera!r} unknown; cameras: {', '.join(self.cameras)}")

    def _object_ids(self, seg: np.ndarray) -> np.ndarray:
        geom_ids = np.where(seg[..., 0] == 5, seg[..., 1], -1)  # objtype 5 = geom
        return np.where(geom_ids >= 0, self._seg_lut[np.clip(geom_ids, 0, None)], -1).astype(np.int32)

    def render(self, camera: str, kind: RenderKind = "rgb", size: int | None = None) -> np.ndarray:
        self._check_camera(camera)
        size = size or self.image_size
        self.counter.renders[kind] = self.counter.renders.get(kind, 0) + 1
        sim = self.sim
        if kind == "rgb":
            img = sim.render(camera_name=camera, width=size, height=size)
            return np.ascontiguousarray(img[::-1])  # OpenGL rows run bottom-up: flip once, here
        if kind == "depth":
            from robosuite.utils.camera_utils import get_real_depth_map

            _, depth = sim.render(camera_name=camera, width=size, height=size, depth=True)
            return np.ascontiguousarray(get_real_depth_map(sim, depth[::-1]))
        if kind == "segmentation":
            seg = sim.render(camera_name=camera, width=size, height=size, segmentation=True)[::-1]
            return np.ascontiguousarray(self._object_ids(seg))
        raise ValueError(f"render kind {kind!r}: use rgb, depth or segmentation")

    def render_depth_and_segmentation(self, camera: str, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One render pass giving metric depth and object ids together (perception's hot path)."""
        from robosuite.utils.camera_utils import get_real_depth_map

        self._check_camera(camera)
        size = size or self.image_size
        self.counter.renders["seg+depth"] = self.counter.renders.get("seg+depth", 0) + 1
        seg, depth = self.sim.render(camera_name=camera, width=size, height=size, depth=True, segmentation=True)
        seg, depth = seg[::-1], depth[::-1]
        return np.ascontiguousarray(get_real_depth_map(self.sim, depth)), np.ascontiguousarray(self._object_ids(seg))

    def camera_meta(self, camera: str, size: int | None = None) -> CameraMeta:
        from robosuite.utils.camera_utils import get_camera_extrinsic_matrix, get_camera_intrinsic_matrix

        size = size or self.image_size
        K = get_camera_intrinsic_matrix(self.sim, camera, size, size)
        E = get_camera_extrinsic_matrix(self.sim, camera)
        return CameraMeta(camera=camera, width=size, height=size, intrinsics=K.tolist(), extrinsics=E.tolist())

    def world_to_pixel_matrix(self, camera: str, size: int) -> np.ndarray:
        from robosuite.utils.camera_utils import get_camera_transform_matrix

        return get_camera_transform_matrix(self.sim, camera, size, size)
