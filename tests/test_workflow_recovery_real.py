"""A grid of real simulator episodes killed with SIGKILL mid-run, then the same command again (marked slow).

The scripted planner is deterministic, so the final database must equal an
uninterrupted run's on every deterministic column; episodes finished before
the kill keep their files; a half-written trace is never ingested.  Two
instances x two agents without VLA or guides: about 2 minutes on a quiet
2-CPU machine (three runs of the grid), several under load.  test_workflow_recovery.py runs the same checks
on fake episodes in the default test run.
"""
from __future__ import annotations

import pytest

from test_workflow_recovery import Grid, kill_mid_run

pytestmark = pytest.mark.slow

REAL = {"benchmarks": {"libero_pro": {"tasks": ["libero_spatial_swap/0", "libero_spatial_swap/1"], "seeds": [0],
                                      "call_budget": 40}},
        "agents": ["tool", "code"], "ablations": ["no_vla_no_guides"]}


def test_real_grid_killed_mid_run_completes_like_an_uninterrupted_one(new_workflow):
    reference = Grid(new_workflow(), None, REAL)
    proc = reference.run(timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:]

    grid = Grid(new_workflow(), None, REAL)
    finished, partial = kill_mid_run(grid, 1, timeout=1200)
    recorded = {d: m for d, m in finished.items() if f"{d}/episode.json" not in grid.marked_incomplete()}
    proc = grid.run(timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "removed the locks of an earlier run that was killed" in proc.stdout
    assert {d: m for d, m in grid.complete().items() if d in recorded} == recorded
    assert not grid.partial()
    assert grid.episodes() == reference.episodes()
