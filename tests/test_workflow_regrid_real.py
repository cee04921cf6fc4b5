"""The grid on disk is what the config says, on real simulator episodes (marked slow).

Two instances x two agents without VLA or guides, the real `cellbench play`
(scripted planner, deterministic): after a complete run, a deleted trace is
run again alone, a deleted database is rebuilt without an episode, and
`kill -9` of the Snakemake process alone during episodes, then an immediate
rerun, ends with the database of the first run and every trace written by
one process.  tests/test_workflow_regrid.py runs the same checks on fake
episodes in the default test run.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_workflow import job_counts
from test_workflow_recovery import Grid
from test_workflow_recovery_real import REAL

pytestmark = pytest.mark.slow


def _plays(wf: Path) -> list[int]:
    """pids of the `cellbench play` processes running in `wf`."""
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if len(argv) > 2 and argv[1].endswith("/cellbench") and argv[2] == "play" and Path(cwd) == wf:
            pids.append(int(entry))
    return pids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def one_run_per_trace(grid: Grid) -> None:
    """Every trace's call rows are one run's: numbered 1..n_calls, none before its record's start."""
    for d in grid.dirs:
        record = json.loads((grid.wf / d / "episode.json").read_text())
        rows = [json.loads(r) for r in (grid.wf / d / "calls.jsonl").read_text().splitlines()]
        assert [r["call_index"] for r in rows] == list(range(1, record["n_calls"] + 1)), d
        assert all(r["started_at"] >= record["started_at"] for r in rows), d


def test_real_grid_deleted_trace_deleted_database_and_snakemake_killed_alone(new_workflow):
    grid = Grid(new_workflow(), None, REAL)
    proc = grid.run(timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:]
    reference = grid.episodes()
    assert len(reference) == len(grid.dirs) == 4

    # A deleted trace: that episode alone, then the tables.
    kept = grid.complete()
    shutil.rmtree(grid.wf / grid.dirs[1])
    proc = grid.run(timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert job_counts(proc.stdout) == {"episode": 1, "ingest": 1, "report": 1, "figures": 1, "all": 1, "total": 5}
    assert {d: m for d, m in grid.complete().items() if d != grid.dirs[1]} == {
        d: m for d, m in kept.items() if d != grid.dirs[1]}
    assert grid.episodes() == reference

    # A deleted database: rebuilt from the traces, no episode.
    kept = grid.complete()
    (grid.wf / "results" / "traces.duckdb").unlink()
    proc = grid.run(timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert job_counts(proc.stdout) == {"ingest": 1, "report": 1, "figures": 1, "all": 1, "total": 4}
    assert grid.complete() == kept and grid.episodes() == reference

    # kill -9 of Snakemake alone while it redoes the whole grid, then the same command at once.
    files = [f"{d}/episode.json" for d in grid.dirs]
    run = subprocess.Popen(grid.command("--forcerun", *files), cwd=grid.wf, env=grid.env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 1200
    while not (grid.partial() and _plays(grid.wf)):
        assert run.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.1)
    orphans = _plays(grid.wf)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    proc = grid.run(timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert not [pid for pid in orphans if _alive(pid)]
    assert sorted(grid.complete()) == sorted(grid.dirs) and not grid.partial()
    one_run_per_trace(grid)
    assert grid.episodes() == reference
