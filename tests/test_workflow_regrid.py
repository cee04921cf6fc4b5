"""The grid on disk is what the config says, whatever happened to results/.

The real `snakemake` on the small grid of test_workflow_recovery.py (3
instances x 2 agents, fake `cellbench play` episodes of tests/fake_play.py,
the real ingest and report): after a complete run, a deleted trace is run
again (that episode alone) and the tables refreshed; a deleted database is
rebuilt without running an episode; `kill -9` of the Snakemake process alone
leaves episodes that stop by themselves, and an immediate rerun completes the
grid with every trace written by one process; the README's one-command
redos (episodes chosen by SQL, the tables) do what they say.
tests/test_workflow_regrid_real.py
does the same on real simulator episodes (marked slow).
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
from test_workflow_recovery import BIN, HERE, Grid, make_cellbench_stub

TABLE = Path("results/tables/success.csv")


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    return make_cellbench_stub(tmp_path_factory.mktemp("bin"), HERE / "fake_play.py")


@pytest.fixture(scope="module")
def complete(new_workflow, bin_dir) -> Grid:
    """One complete run of the small grid; tests work on copies of it."""
    grid = Grid(new_workflow(), bin_dir, FAKE_PLAY_CALL_S="0.05")
    proc = grid.run()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert len(grid.complete()) == len(grid.dirs) == 6
    return grid


@pytest.fixture(scope="module")
def reference(complete) -> list[tuple]:
    """The database rows of an uninterrupted run."""
    return complete.episodes()


def complete_grid(complete: Grid, tmp_path: Path) -> Grid:
    """A copy of the complete grid (files, times and Snakemake's records), up to date as it is."""
    wf = tmp_path / "wf"
    shutil.copytree(complete.wf, wf, symlinks=True)
    grid = Grid.__new__(Grid)
    grid.wf, grid.dirs, grid.env = wf, complete.dirs, dict(complete.env)
    # The analysis code's digest is a tracked param of ingest: in a checkout edited since the
    # fixture ran, the tables are redrawn here first (never an episode).
    proc = grid.run()
    assert proc.returncode == 0 and "episode" not in job_counts(proc.stdout), proc.stdout[-4000:]
    if "Nothing to be done" not in proc.stdout:
        assert "Nothing to be done" in grid.run("-n").stdout
    return grid


def mtimes(grid: Grid, *paths: Path) -> dict[Path, int]:
    return {p: (grid.wf / p).stat().st_mtime_ns for p in paths}


def test_a_deleted_trace_is_run_again_alone_and_the_tables_refreshed(complete, tmp_path, reference):
    grid = complete_grid(complete, tmp_path)
    table = (grid.wf / TABLE).read_text()
    gone = grid.dirs[3]
    kept = {d: m for d, m in grid.complete().items() if d != gone}
    before = mtimes(grid, Path("results/traces.duckdb"), TABLE)
    shutil.rmtree(grid.wf / gone)

    # `snakemake figures` still never starts an episode.
    assert "episode" not in job_counts(grid.run("-n", "figures").stdout)

    proc = grid.run()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert job_counts(proc.stdout) == {"episode": 1, "ingest": 1, "report": 1, "figures": 1, "all": 1, "total": 5}
    assert {d: m for d, m in grid.complete().items() if d != gone} == kept  # the others were not touched
    assert gone in grid.complete()
    after = mtimes(grid, *before)
    assert all(after[p] > before[p] for p in before), (before, after)
    assert grid.episodes() == reference and (grid.wf / TABLE).read_text() == table
    assert "Nothing to be done" in grid.run("-n").stdout


def test_a_deleted_database_is_rebuilt_without_running_an_episode(complete, tmp_path, reference):
    grid = complete_grid(complete, tmp_path)
    traces = grid.complete()
    table = mtimes(grid, TABLE)
    (grid.wf / "results" / "traces.duckdb").unlink()

    proc = grid.run()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert job_counts(proc.stdout) == {"ingest": 1, "report": 1, "figures": 1, "all": 1, "total": 4}
    assert grid.complete() == traces
    assert grid.episodes() == reference
    assert mtimes(grid, TABLE)[TABLE] > table[TABLE]


def _plays(wf: Path) -> dict[int, str]:
    """pid -> trace directory of the fake `cellbench play` processes running in `wf`."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode().split("\0")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if any(a.endswith("fake_play.py") for a in argv) and "--out" in argv and Path(cwd) == wf:
            out[int(entry)] = argv[argv.index("--out") + 1]
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def writers(grid: Grid, trace_dir: str) -> set[int]:
    rows = (grid.wf / trace_dir / "calls.jsonl").read_text().splitlines()
    return {json.loads(r)["raw_usage"]["writer_pid"] for r in rows}


def test_sigkill_of_snakemake_alone_then_an_immediate_rerun(new_workflow, bin_dir, reference):
    grid = Grid(new_workflow(), bin_dir, FAKE_PLAY_CALL_S="0.5")
    run = grid.start()
    deadline = time.monotonic() + 120
    while not (grid.complete() and grid.partial() and _plays(grid.wf)):
        assert run.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    orphans = _plays(grid.wf)
    os.kill(run.pid, signal.SIGKILL)  # Snakemake alone: its episodes' processes are left running
    run.wait()

    proc = grid.run()  # at once
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert not [pid for pid in orphans if _alive(pid)]
    assert sorted(grid.complete()) == sorted(grid.dirs) and not grid.partial()
    assert grid.episodes() == reference  # every trace ingests, with the same outcomes
    for d in grid.dirs:
        rows = writers(grid, d)
        assert len(rows) == 1, (d, rows)  # no trace has rows from two processes
    for pid, d in orphans.items():
        assert writers(grid, d) != {pid}  # unrecorded by Snakemake: redone by the rerun, not kept
    assert "Nothing to be done" in grid.run("-n").stdout


def test_episodes_selected_by_sql_and_the_tables_are_redone_one_command_each(complete, tmp_path, reference):
    grid = complete_grid(complete, tmp_path)
    before = grid.complete()
    select = [str(BIN / "cellbench"), "select", "agent = 'tool' AND seed >= 1"]
    proc = subprocess.run(select, cwd=grid.wf, env=grid.env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    chosen = proc.stdout.split()
    assert chosen == sorted(f"{d}/episode.json" for d in grid.dirs if "/tool/" in d and not d.endswith("seed0"))
    assert "2 episodes where agent = 'tool' AND seed >= 1" in proc.stderr

    # snakemake --forcerun $(cellbench select "...")
    proc = grid.run("--forcerun", *chosen)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert job_counts(proc.stdout) == {"episode": 2, "ingest": 1, "report": 1, "figures": 1, "all": 1, "total": 6}
    after = grid.complete()
    assert {d for d in grid.dirs if after[d] != before[d]} == {c.rsplit("/", 1)[0] for c in chosen}
    assert grid.episodes() == reference

    # The tables alone: snakemake figures --forcerun ingest
    proc = grid.run("figures", "--forcerun", "ingest")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert job_counts(proc.stdout) == {"ingest": 1, "report": 1, "figures": 1, "total": 3}
    assert grid.complete() == after

    # A condition the episodes table cannot answer is refused, naming it.
    proc = subprocess.run(select[:2] + ["statuz = 'error'"], cwd=grid.wf, env=grid.env, capture_output=True, text=True)
    assert proc.returncode == 2 and """condition "statuz = 'error'" failed on the episodes table""" in proc.stderr
