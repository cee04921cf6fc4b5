"""Trace writer (schema v1): one directory per episode, `episode.json` written last and atomically.

Rows are appended and flushed as the episode runs, so a killed run leaves a
directory without `episode.json` — which ingest reports and skips, and the
next run overwrites.

An episode the LLM endpoint never let finish (status `planner_error`) is an
infrastructure failure, not a result: its record goes to `planner_error.json`
instead, so the episode stays incomplete (the workflow re-runs it; `cellbench
play` exits 3) while ingest still loads it, listed and excluded from rates.

Before the record, the code agent's cell statistics go to `cells/stats.json`
(analysis.cellstats, "Stored statistics"): a cache that spares ingest the
parsing, checked against the cells and primitives before it is used.

One writer at a time: a writer holds an exclusive `flock` on the directory's
`.lock` file from before its first write until the record is written (the
kernel drops it however the process ends).  A second writer of the same
directory waits for the first, then refuses naming the directory and the
live process; it never writes while the lock is held.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agents.errors import CellbenchError
from agents.records import CallRecord, EpisodeRecord, PrimitiveRecord

EPISODE_FILE = "episode.json"
PLANNER_ERROR_FILE = "planner_error.json"
TRACE_FILES = ("calls.jsonl", "primitives.jsonl", "transcript.json", EPISODE_FILE, PLANNER_ERROR_FILE, "view.html")


def record_file(trace_dir: str | os.PathLike) -> Path | None:
    """The episode record of a trace: episode.json, else planner_error.json, else None (still running or killed)."""
    for name in (EPISODE_FILE, PLANNER_ERROR_FILE):
        path = Path(trace_dir) / name
        if path.exists():
            return path
    return None


LOCK_FILE = ".lock"
#: How long a second writer of a trace directory waits for the first to end before it refuses.
LOCK_WAIT_S = 120.0
_HELD: dict[str, int] = {}  # realpath of a trace directory -> the fd of its held .lock


class TraceDirBusy(CellbenchError):
    """Another live process holds the trace directory's lock."""


class _Replaced(Exception):
    """The locked file is no longer the directory's .lock."""


def _holder(fd: int) -> str:
    text = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    return text or "a process that has not yet said which"


def _try_lock(fd: int, lock: Path) -> bool:
    """flock `fd`; False while another process holds it.  A lock on a file no longer at `lock`
    (a writer that ended removed it, or the directory was replaced) does not count."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    try:
        if os.stat(lock).st_ino == os.fstat(fd).st_ino:
            return True
    except FileNotFoundError:
        pass
    raise _Replaced


def hold_trace_dir(trace_dir: str | os.PathLike, wait_s: float = LOCK_WAIT_S) -> None:
    """Take the exclusive lock on `trace_dir` (created if missing) for this process, waiting up to
    `wait_s` for another holder to end; held until `release_trace_dir` or the process ends.
    Taking it again in the same process is a no-op.  Raises TraceDirBusy naming the holder."""
    path = Path(trace_dir)
    key = os.path.realpath(path)
    if key in _HELD:
        return
    lock = path / LOCK_FILE
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            while not _try_lock(fd, lock):
                if not said:
                    print(f"trace: {path} is being written by {_holder(fd)}; waiting up to {wait_s:.0f} s "
                          f"for it to end", file=sys.stderr, flush=True)
                    said = True
                if time.monotonic() >= deadline:
                    raise TraceDirBusy(
                        f"{path} is being written by {_holder(fd)} (it holds {lock}); not writing into it. "
                        f"Let that process end, or stop it, then run this again")
                time.sleep(0.2)
            break
        except _Replaced:
            os.close(fd)  # locked a removed file: open the one now there
        except BaseException:
            os.close(fd)
            raise
    argv = " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
    note = f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')} ({argv})"
    os.ftruncate(fd, 0)
    os.pwrite(fd, (note + "\n").encode(), 0)
    _HELD[key] = fd


def release_trace_dir(trace_dir: str | os.PathLike) -> None:
    """Drop this process's lock on `trace_dir` (nothing if it holds none)."""
    fd = _HELD.pop(os.path.realpath(trace_dir), None)
    if fd is not None:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class TraceWriter:
    def __init__(self, out_dir: str | os.PathLike, lock_wait_s: float = LOCK_WAIT_S):
        self.dir = Path(out_dir)
        # Before the first write (`cellbench play` takes it earlier, before the simulator starts).
        hold_trace_dir(self.dir, lock_wait_s)
        # A previous, interrupted attempt may have left rows behind: start clean.
        for name in TRACE_FILES:
            (self.dir / name).unlink(missing_ok=True)
        for sub in ("images", "cells"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)
            (self.dir / sub).mkdir()
        shutil.rmtree(self.dir / "work", ignore_errors=True)  # the runtime's working directory (agents.runtime)
        self._calls = open(self.dir / "calls.jsonl", "a")
        self._prims = open(self.dir / "primitives.jsonl", "a")
        self._n_images = 0
        self._cells: list[tuple[int, str]] = []
        self._executed: dict[int, list[tuple[str, bool]]] = {}

    def image(self, call_index: int, camera: str, png: bytes) -> str:
        """Save a PNG; returns its path relative to the trace directory."""
        rel = f"images/call{call_index:03d}_{self._n_images:04d}_{camera}.png"
        (self.dir / rel).write_bytes(png)
        self._n_images += 1
        return rel

    def cell(self, call_index: int, code: str) -> str:
        rel = f"cells/cell_{call_index:03d}.py"
        (self.dir / rel).write_text(code)
        self._cells.append((call_index, code))
        return rel

    def call(self, rec: CallRecord) -> None:
        self._calls.write(json.dumps(asdict(rec)) + "\n")
        self._calls.flush()

    def primitive(self, rec: PrimitiveRecord) -> None:
        self._prims.write(json.dumps(asdict(rec)) + "\n")
        self._prims.flush()
        self._executed.setdefault(rec.call_index, []).append((rec.name, rec.acting))

    def transcript(self, messages: list[dict[str, Any]], image_refs: dict[str, str],
                   name: str = "transcript.json") -> None:
        """The conversation with each image data URL replaced by its file reference (`name`: another
        file of the trace directory, e.g. the conversation before a compaction)."""

        def strip(content):
            if isinstance(content, list):
                out = []
                for part in content:
                    if part.get("type") == "image_url":
                        url = part["image_url"]["url"]
                        out.append({"type": "image_ref", "path": image_refs.get(image_key(url), "?")})
                    else:
                        out.append(part)
                return out
            return content

        msgs = [{**m, "content": strip(m.get("content"))} for m in messages]
        atomic_write_text(self.dir / name, json.dumps(msgs, indent=1))

    def discard(self) -> None:
        """Remove what this writer (and the runtime) put in the directory: there was no episode."""
        self._calls.close()
        self._prims.close()
        for name in (*TRACE_FILES, "runtime.log"):
            (self.dir / name).unlink(missing_ok=True)
        for sub in ("images", "cells", "work"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)
        (self.dir / LOCK_FILE).unlink(missing_ok=True)
        release_trace_dir(self.dir)
        try:
            self.dir.rmdir()
        except OSError:
            pass  # the directory held other files before

    def finish(self, rec: EpisodeRecord) -> None:
        self._calls.close()
        self._prims.close()
        if self._cells:
            self._store_cell_stats()
        name = PLANNER_ERROR_FILE if rec.status == "planner_error" else EPISODE_FILE
        atomic_write_text(self.dir / name, json.dumps(asdict(rec), indent=1))
        release_trace_dir(self.dir)


    def _store_cell_stats(self) -> None:
        from analysis.cellstats import STORED_STATS_FILE, stored_stats

        try:
            doc = stored_stats(self._cells, self._executed)
        except Exception as e:  # noqa: BLE001 - a cache: ingest computes what is missing, the episode must not be lost
            print(f"trace: cell statistics not stored ({type(e).__name__}: {e}); ingest computes them",
                  file=sys.stderr)
            return
        atomic_write_text(self.dir / "cells" / STORED_STATS_FILE, json.dumps(doc))


def image_key(url: str) -> str:
    """Key of an image data URL in the transcript's image references."""
    import hashlib

    return hashlib.sha1(url.encode()).hexdigest()


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()
