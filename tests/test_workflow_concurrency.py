"""Endpoint-bound episodes run by memory, not by cores: workflow/profiles/remote-planner.

The real `snakemake` runs a small grid (6 episodes of the fake `cellbench
play`, ~0.5 s per LLM call) with the profile on one core and room for three
episodes' memory; the episodes' own start and end times must show three at
once, never more.  The default profile on the same core runs one at a time.
"""
from __future__ import annotations

import json
import subprocess

from test_workflow_recovery import BIN, HERE, Grid, make_cellbench_stub


def most_at_once(grid: Grid) -> int:
    spans = [json.loads((grid.wf / d / "episode.json").read_text()) for d in grid.dirs]
    events = sorted([(s["started_at"], 1) for s in spans] + [(s["finished_at"], -1) for s in spans],
                    key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _run(grid: Grid, *args: str) -> None:
    targets = [f"{d}/episode.json" for d in grid.dirs]
    # Targets first: --resources and --set-resources take every word after them.
    proc = subprocess.run([str(BIN / "snakemake"), *targets, "--cores", "1", *args,
                           "--set-resources", "episode:mem_mb=1000"], cwd=grid.wf, env=grid.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_remote_planner_profile_bounds_episodes_by_memory(new_workflow, tmp_path_factory):
    bin_dir = make_cellbench_stub(tmp_path_factory.mktemp("bin"), HERE / "fake_play.py")
    remote = Grid(new_workflow(), bin_dir, FAKE_PLAY_CALL_S="0.5")
    _run(remote, "--workflow-profile", "workflow/profiles/remote-planner", "--resources", "mem_mb=3000")
    assert most_at_once(remote) == 3
    default = Grid(new_workflow(), bin_dir, FAKE_PLAY_CALL_S="0.5")
    _run(default, "--resources", "mem_mb=3000")
    assert most_at_once(default) == 1
