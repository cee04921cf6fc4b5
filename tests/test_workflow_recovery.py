"""Nothing lost: a grid run killed with SIGKILL, and an episode the endpoint never let finish.

The real `snakemake` runs a small grid (3 instances x 2 agents) in scratch
copies of the workflow, with the profile's settings.  Episodes are the fake
`cellbench play` of tests/fake_play.py (a real-schema trace in ~1 s, outcomes
fixed by the episode's ids, like the scripted planner's); ingest and report
are the real commands, figures an empty folder.  tests/test_workflow_recovery_real.py kills
a grid of real simulator episodes the same way (marked slow).
"""
from __future__ import annotations

import base64
import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from agents.config import episode_grid, validate_config

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
#: Overrides of config.yaml: 3 instances x 2 agents x 1 ablation.
SMALL = {"benchmarks": {"libero_pro": {"tasks": ["libero_spatial_swap/0"], "seeds": [0, 1, 2], "call_budget": 40}},
         "agents": ["tool", "code"], "ablations": ["full"]}
#: Columns of the episodes table that a deterministic planner reproduces exactly.
DETERMINISTIC = ("trace_dir", "benchmark", "task", "seed", "agent", "ablation", "repeat", "status", "success",
                 "solved_at_call", "n_calls", "input_tokens", "cached_input_tokens", "cache_write_tokens",
                 "output_tokens", "reasoning_tokens")


def make_cellbench_stub(bin_dir: Path, play: Path) -> Path:
    """A `cellbench` that runs `play` with `play` (a script), makes an empty figures folder (drawing
    takes 15-20 s here and is tested elsewhere), and runs every other verb with the real CLI."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    stub = bin_dir / "cellbench"
    stub.write_text(f'#!/bin/sh\ncase "$1" in\n'
                    f'  play) shift; exec "{sys.executable}" "{play}" "$@";;\n'
                    f'  figures) while [ $# -gt 0 ]; do [ "$1" = --out ] && mkdir -p "$2"; shift; done; exit 0;;\n'
                    f'esac\nexec "{BIN / "cellbench"}" "$@"\n')
    stub.chmod(0o755)
    return bin_dir


def small_config(overrides: dict) -> dict:
    import yaml

    config = yaml.safe_load((HERE.parent / "config.yaml").read_text())
    config.update(overrides)
    return config


class Grid:
    """One scratch workflow with the small config and the fake episodes."""

    def __init__(self, wf: Path, bin_dir: Path | None, overrides: dict = SMALL, **env: str):
        """`bin_dir`: where the `cellbench` stub is (None: the real one)."""
        import yaml

        self.wf = wf
        config = small_config(overrides)
        (wf / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.dirs = [e["trace_dir"] for e in episode_grid(validate_config(config))]
        path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}" if bin_dir else os.environ["PATH"]
        self.env = {**os.environ, "PATH": path, **env}
        self.env.pop("SNAKEMAKE_PROFILE", None)

    def command(self, *args: str) -> list[str]:
        return [str(BIN / "snakemake"), "--cores", "2", *args]

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), cwd=self.wf, env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)

    def start(self) -> subprocess.Popen:
        return subprocess.Popen(self.command(), cwd=self.wf, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)

    def complete(self) -> dict[str, int]:
        """trace dir -> episode.json mtime (ns), for the grid's finished episodes."""
        out = {}
        for d in self.dirs:
            p = self.wf / d / "episode.json"
            if p.exists():
                out[d] = p.stat().st_mtime_ns
        return out

    def partial(self) -> list[str]:
        return [d for d in self.dirs
                if (self.wf / d / "calls.jsonl").exists() and not (self.wf / d / "episode.json").exists()]

    def marked_incomplete(self) -> set[str]:
        """Outputs Snakemake marked incomplete (a job started, not recorded done)."""
        root = self.wf / ".snakemake" / "incomplete"
        names = ["".join(p.relative_to(root).parts) for p in root.rglob("*") if p.is_file()] if root.exists() else []
        return {base64.urlsafe_b64decode(n + "=" * (-len(n) % 4)).decode() for n in names}

    def episodes(self, db: Path | None = None) -> list[tuple]:
        con = duckdb.connect(str(db or self.wf / "results" / "traces.duckdb"), read_only=True)
        try:
            return con.execute(f"SELECT {', '.join(DETERMINISTIC)} FROM episodes ORDER BY trace_dir").fetchall()
        finally:
            con.close()


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    return make_cellbench_stub(tmp_path_factory.mktemp("bin"), HERE / "fake_play.py")


@pytest.fixture(scope="module")
def reference(new_workflow, bin_dir) -> list[tuple]:
    """The database of an uninterrupted run."""
    grid = Grid(new_workflow(), bin_dir)
    proc = grid.run()
    assert proc.returncode == 0, proc.stdout[-4000:]
    rows = grid.episodes()
    assert len(rows) == len(grid.dirs) == 6
    return rows


def kill_mid_run(grid: Grid, done: int, timeout: float) -> tuple[dict[str, int], list[str]]:
    """Start the grid, SIGKILL the whole run once `done` episodes are finished and another is
    half-written; return (finished episodes with their episode.json mtimes, half-written ones)."""
    run = grid.start()
    deadline = time.monotonic() + timeout
    while not (len(grid.complete()) >= done and grid.partial()) and time.monotonic() < deadline:
        assert run.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    finished, partial = grid.complete(), grid.partial()
    assert len(finished) >= done and partial, (finished, partial)
    return finished, partial


def test_sigkill_mid_run_then_the_same_command_completes(new_workflow, bin_dir, reference):
    grid = Grid(new_workflow(), bin_dir, FAKE_PLAY_CALL_S="0.5")
    finished, partial = kill_mid_run(grid, 2, timeout=120)
    assert any((grid.wf / ".snakemake" / "locks").iterdir())  # the killed run's locks are left behind
    # An episode that wrote episode.json a moment before the kill, but that Snakemake had not yet
    # recorded as done, is re-run: only the recorded ones must keep their files.
    recorded = {d: m for d, m in finished.items() if f"{d}/episode.json" not in grid.marked_incomplete()}
    assert recorded

    # Ingest now: the half-written traces are reported and left out.
    proc = subprocess.run([str(BIN / "cellbench"), "ingest", "--results", "results/episodes", "--db",
                           str(grid.wf / "killed.duckdb")], cwd=grid.wf, env=grid.env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(r[0] for r in grid.episodes(grid.wf / "killed.duckdb")) == sorted(finished)
    for d in partial:
        assert f"skipped incomplete trace (no episode.json): {d}" in proc.stderr

    # The same command again: it completes, redoing only what was not done.
    proc = grid.run()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "removed the locks of an earlier run that was killed" in proc.stdout
    assert {d: m for d, m in grid.complete().items() if d in recorded} == recorded
    assert grid.episodes() == reference
    assert not grid.partial()


def test_planner_error_is_listed_excluded_and_rerun_by_the_next_invocation(new_workflow, bin_dir, reference,
                                                                           tmp_path):
    listing = tmp_path / "fail_once.txt"
    grid = Grid(new_workflow(), bin_dir, FAKE_PLAY_CALL_S="0.05", FAKE_PLAY_FAIL_ONCE=str(listing))
    failing = [d for d in grid.dirs if "/tool/" in d and d.endswith("seed1")]
    listing.write_text("\n".join(failing) + "\n")

    proc = grid.run()
    assert proc.returncode != 0  # the run says something needs doing again
    assert "planner_error" in proc.stdout and "the next `snakemake` runs it again" in proc.stdout
    [bad] = failing
    assert (grid.wf / bad / "planner_error.json").exists() and not (grid.wf / bad / "episode.json").exists()
    assert set(grid.complete()) == set(grid.dirs) - {bad}

    # The tables from what is on disk: the planner_error episode is listed, and left out of the rates.
    proc = grid.run("figures")
    assert proc.returncode == 0, proc.stdout[-4000:]
    tables = grid.wf / "results" / "tables"
    assert bad in (tables / "planner_errors.csv").read_text()
    with open(tables / "success.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and {r["n_instances"] for r in rows} == {"2"}  # seed 1 has no tool result to pair

    # The next invocation runs that episode again, and only it.
    before = grid.complete()
    proc = grid.run()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert grid.complete().items() >= before.items()
    assert not (grid.wf / bad / "planner_error.json").exists() and (grid.wf / bad / "episode.json").exists()
    assert grid.episodes() == reference
