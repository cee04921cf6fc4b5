"""How an episode's robosuite scene is compiled: textures sized for its images, the compiled model reused.

An episode's runtime child builds one MuJoCo scene; three things made that
build cost ~1.6 GB resident and ~10 s on a LIBERO-PRO task
(benchmarks/episode_cost.py), and each is cut here:

* Textures far larger than the images.  LIBERO's scanned objects carry
  4096 x 4096 textures (the black bowl, the plate: 50 MB each decoded, one
  copy per object instance, another in the GL context with its mipmaps) for
  camera images of 256 px.  At that size the renderer samples them from
  mipmap level 2 and below, so a copy halved twice by 2 x 2 box averages (as
  mipmaps are made) draws the same picture: the three cameras' images differ
  by at most a few of 255 levels (tests/test_scene_cache.py).  Textures
  are capped at `max_texture_size(image_size)` (1024 for 256 px); the copies
  are made once per file and machine, under `cache_dir()`.
* MuJoCo's compile.  It takes seconds, and the heap it leaves fragmented
  stays resident (~180 MB on LIBERO scenes, in the compiler's thread arenas).
  The compiled model is stored as MJB under `cache_dir()`, keyed by a hash of
  the scene XML and the MuJoCo version, so later episodes of the task load it
  (a plain copy of the model's arrays) instead of compiling.  A loaded model is
  the compiled one bit for bit, and so is the state it resets to (the test).
* MuJoCo's own asset cache (3.x, 512 MB by default) keeps every decoded mesh
  and texture of a compile for a next compile in the same process; an episode
  compiles at most one scene, so it is switched off.

Physics never reads a texture: capping them leaves the simulator's state
bit for bit the same (the test compares it with a full-size build).
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path

#: Texels a texture may have per pixel of the camera image, along each side.
TEXELS_PER_PIXEL = 4
#: Compiled models kept on disk, bytes (oldest used dropped first); $CELLBENCH_MODEL_CACHE_MB overrides.
MODEL_CACHE_BYTES = 8 * 2**30
_TEXTURE_TAG = re.compile(r"<texture\b[^>]*>")


def max_texture_size(image_size: int) -> int:
    """The longest texture side kept for images of `image_size` px: a power of two >= 4 x image_size."""
    want = TEXELS_PER_PIXEL * max(int(image_size), 1)
    return 1 << (want - 1).bit_length()


def cache_dir() -> Path:
    """$CELLBENCH_CACHE, else $XDG_CACHE_HOME/cellbench, else ~/.cache/cellbench."""
    root = os.environ.get("CELLBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cellbench")
    return Path(root)


def _atomic_write(path: Path, write) -> None:
    """write(tmp_path), then rename into place: concurrent episodes never read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def downscaled(path: str, max_size: int) -> str:
    """A PNG of `path` halved until its longer side is <= max_size (2 x 2 box averages); `path` if small enough."""
    from PIL import Image

    with Image.open(path) as im:
        width, height = im.size
        factor = 1
        while max(width, height) // factor > max_size:
            factor *= 2
        if factor == 1:
            return path
        st = os.stat(path)
        key = hashlib.sha256(f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{factor}".encode())
        out = cache_dir() / "textures" / f"{Path(path).stem}-{key.hexdigest()[:16]}-x{factor}.png"
        if out.exists():
            return str(out)
        small = im.convert("RGBA" if "A" in im.getbands() or im.mode == "P" else "RGB").reduce(factor)
    try:
        _atomic_write(out, lambda tmp: small.save(tmp, format="PNG"))
    except OSError:  # no writable cache (a read-only home on a node): the full-size texture, more memory
        return path
    return str(out)


def cap_textures(xml: str, max_size: int) -> str:
    """The scene XML with each texture file larger than max_size replaced by its downscaled copy.

    2-D textures, and cube textures made of one image repeated on the six faces
    (no `gridsize`: LIBERO's 1270 px wood tables, whose twelve faces took
    llvmpipe ~1.2 s to upload).  Skyboxes and cube textures laid out as a grid
    of faces (whose size must stay divisible) are left alone."""

    def one(m: re.Match) -> str:
        tag = m.group(0)
        kind = re.search(r'\btype="([^"]+)"', tag)
        kind = kind.group(1) if kind else "cube"  # MuJoCo's default
        if kind not in ("2d", "cube") or (kind == "cube" and "gridsize" in tag):
            return tag
        return re.sub(r'\bfile="([^"]+)"', lambda f: f'file="{downscaled(f.group(1), max_size)}"', tag)

    return _TEXTURE_TAG.sub(one, xml)


def disable_mujoco_asset_cache() -> None:
    import mujoco

    mujoco.mj_setCacheCapacity(mujoco.mj_getCache(), 0)


def model_cache_path(xml: str) -> Path:
    """Keyed by the MuJoCo version, the XML and the size and mtime of every file it names (meshes,
    textures): an upgraded asset package or an edited mesh gets a compile of its own."""
    import mujoco

    h = hashlib.sha256(f"mujoco {mujoco.__version__}\0".encode() + xml.encode())
    for name in sorted(set(re.findall(r'\bfile="([^"]+)"', xml))):
        try:
            st = os.stat(name)
            h.update(f"\0{name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        except OSError:  # relative to a meshdir/texturedir: the XML's text still keys it
            h.update(f"\0{name}\0?".encode())
    return cache_dir() / "models" / f"{h.hexdigest()[:32]}.mjb"


def compiled_model(xml: str, reuse: bool = True):
    """The MjModel of `xml`: loaded from the model cache when stored there, else compiled (and stored)."""
    import mujoco

    if not reuse:
        return mujoco.MjModel.from_xml_string(xml)
    path = model_cache_path(xml)
    try:
        model = mujoco.MjModel.from_binary_path(str(path))
        os.utime(path)  # most recently used: evicted last
        return model
    except (FileNotFoundError, ValueError):  # absent, or half-evicted / unreadable: compile afresh
        pass
    model = mujoco.MjModel.from_xml_string(xml)
    try:
        _atomic_write(path, lambda tmp: mujoco.mj_saveModel(model, tmp))
        _evict(path.parent, int(os.environ.get("CELLBENCH_MODEL_CACHE_MB", 0)) * 2**20 or MODEL_CACHE_BYTES)
    except OSError:
        pass  # a read-only or full cache only costs the next episode its compile
    return model


def _evict(folder: Path, budget: int) -> None:
    files = sorted(folder.glob("*.mjb"), key=lambda p: p.stat().st_mtime, reverse=True)
    total = 0
    for p in files:
        total += p.stat().st_size
        if total > budget:
            p.unlink(missing_ok=True)


@contextmanager
def episode_scene_build(max_texture: int | None, reuse_model: bool = True):
    """While building a robosuite env: its scene compiled with textures capped at max_texture (None: as
    they are) and the compiled model reused from / stored in the model cache (`reuse_model`)."""
    import robosuite.utils.binding_utils as bu

    original = bu.MjSim.__dict__["from_xml_string"]

    def from_xml_string(cls, xml):
        if max_texture is not None:
            xml = cap_textures(xml, max_texture)
        return cls(compiled_model(xml, reuse_model))

    bu.MjSim.from_xml_string = classmethod(from_xml_string)
    try:
        yield
    finally:
        bu.MjSim.from_xml_string = original
