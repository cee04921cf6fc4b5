"""On-demand camera rendering for backends over a robosuite `MjSim` (LIBERO-PRO, the two-arm envs).

One place for what every robosuite scene here needs: RGB, metric depth and
per-pixel object ids rendered only when asked (camera observations stay off
during stepping), flipped upright once (MuJoCo's OpenGL rows run bottom-up),
segmentation mapped geom -> scene object through the backend's lookup table,
and the pinhole model perception needs.  Software GL (llvmpipe) makes RGB the
expensive part; `apply_fast_render` turns off shadows and reflections, which
cost most of it (measured ~3x on LIBERO scenes).

Depth alone never needs the RGB frame: `render(kind="depth")` draws MuJoCo's
flat segmentation pass (no lighting, textures, shadows or multisampling) and
reads back only the depth buffer, 3-5x cheaper than reading depth with an RGB
frame (`benchmarks/robot_speed.py`).
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

            depth, _ = self._render_flat(camera, size)
            return np.ascontiguousarray(get_real_depth_map(sim, depth[::-1]))
        if kind == "segmentation":
            _, seg = self._render_flat(camera, size, segmentation=True)
            return np.ascontiguousarray(self._object_ids(seg[::-1]))
        raise ValueError(f"render kind {kind!r}: use rgb, depth or segmentation")

    def render_depth_and_segmentation(self, camera: str, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One render pass giving metric depth and object ids together (perception's hot path)."""
        from robosuite.utils.camera_utils import get_real_depth_map

        self._check_camera(camera)
        size = size or self.image_size
        self.counter.renders["seg+depth"] = self.counter.renders.get("seg+depth", 0) + 1
        depth, seg = self._render_flat(camera, size, segmentation=True)
        seg, depth = seg[::-1], depth[::-1]
        return np.ascontiguousarray(get_real_depth_map(self.sim, depth)), np.ascontiguousarray(self._object_ids(seg))

    def _render_flat(self, camera: str, size: int, segmentation: bool = False):
        """(raw depth buffer, (objtype, objid) per pixel or None), rows bottom-up, from the flat segmentation pass.

        What `MjSim.render` does for one frame, under its lock, with two changes:
        the scene is drawn in MuJoCo's segmentation mode, and the geoms the
        normal pass leaves out of the depth buffer are skipped, so the same
        surfaces show: transparent ones (alpha < 0.995: the gripper's hidden
        sites, among them a 10 m grip-site line, a stove's burner site) and
        planes seen from behind (MuJoCo's own test in `mjr_render`).  Depth is
        then sampled at pixel centres, not resolved from the RGB pass's
        multisamples: equal to it within ~1-2 mm on surfaces, a pixel's
        difference at object edges (tests/test_robot_libero.py).  With
        `segmentation`, the pass's colours are decoded as robosuite's
        `MjSim.render(segmentation=True)` decodes them; the skipped geoms (the
        grip-site line hanging below the gripper) no longer hide a strip of
        whatever is under it from `locate`.
        """
        import mujoco
        from robosuite.utils.binding_utils import _MjSim_render_lock

        sim = self.sim
        ctx = sim._render_context_offscreen
        scn = ctx.scn
        with _MjSim_render_lock:
            if size > ctx.con.offWidth or size > ctx.con.offHeight:
                g = ctx.model.vis.global_
                ctx.update_offscreen_size(max(size, g.offwidth), max(size, g.offheight))
            ctx.cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            ctx.cam.fixedcamid = sim.model.camera_name2id(camera)
            mujoco.mjv_updateScene(sim.model._model, sim.data._data, ctx.vopt, ctx.pert, ctx.cam,
                                   mujoco.mjtCatBit.mjCAT_ALL, scn)
            head, forward, up = np.zeros(3), np.zeros(3), np.zeros(3)
            mujoco.mjv_cameraInModel(head, forward, up, scn)
            for i in range(scn.ngeom):
                geom = scn.geoms[i]
                behind = geom.type == mujoco.mjtGeom.mjGEOM_PLANE and (head - geom.pos) @ geom.mat[:, 2] < 0
                if geom.rgba[3] < 0.995 or behind:
                    geom.segid = -1  # the segmentation pass draws only geoms with segid >= 0
            viewport = mujoco.MjrRect(0, 0, size, size)
            scn.flags[mujoco.mjtRndFlag.mjRND_SEGMENT] = 1
            scn.flags[mujoco.mjtRndFlag.mjRND_IDCOLOR] = int(segmentation)  # colour = segid + 1
            try:
                mujoco.mjr_render(viewport, scn, ctx.con)
            finally:
                scn.flags[mujoco.mjtRndFlag.mjRND_SEGMENT] = 0
                scn.flags[mujoco.mjtRndFlag.mjRND_IDCOLOR] = 0
            depth = np.empty((size, size), dtype=np.float32)
            rgb = np.empty((size, size, 3), dtype=np.uint8) if segmentation else None
            mujoco.mjr_readPixels(rgb, depth, viewport, ctx.con)
            if not segmentation:
                return depth, None
            # Colour = segid + 1 (0: background), as MjRenderContext.read_pixels decodes it.
            code = rgb[..., 0].astype(np.int64) + rgb[..., 1].astype(np.int64) * 256 + rgb[..., 2].astype(np.int64) * 65536
            code[code >= scn.ngeom + 1] = 0
            lut = np.full((scn.ngeom + 1, 2), -1, dtype=np.int32)
            for i in range(scn.ngeom):
                geom = scn.geoms[i]
                if geom.segid != -1:
                    lut[geom.segid + 1] = (geom.objtype, geom.objid)
        return depth, lut[code]

    def camera_meta(self, camera: str, size: int | None = None) -> CameraMeta:
        from robosuite.utils.camera_utils import get_camera_extrinsic_matrix, get_camera_intrinsic_matrix

        size = size or self.image_size
        K = get_camera_intrinsic_matrix(self.sim, camera, size, size)
        E = get_camera_extrinsic_matrix(self.sim, camera)
        return CameraMeta(camera=camera, width=size, height=size, intrinsics=K.tolist(), extrinsics=E.tolist())

    def world_to_pixel_matrix(self, camera: str, size: int) -> np.ndarray:
        from robosuite.utils.camera_utils import get_camera_transform_matrix

        return get_camera_transform_matrix(self.sim, camera, size, size)
