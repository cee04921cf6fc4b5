"""The same DAG on a SLURM cluster: a small real grid through workflow/profiles/slurm.

Marked `slurm` (deselected by default).  Needs a cluster that `sinfo` and
`sbatch` reach and that shares this filesystem; on one machine:

    sudo workflow/slurm/setup_local_slurm.sh
    .venv/bin/pytest -m slurm -s

Two real episodes (both agents on libero_spatial_swap/0, seed 0, no VLA, no
guides, scripted planner) run as two sbatch jobs; ingest, report and figures
run on the submitting machine.  A few minutes.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent
TINY = {"benchmarks": {"libero_pro": {"tasks": ["libero_spatial_swap/0"], "seeds": [0], "call_budget": 40}},
        "agents": ["tool", "code"], "ablations": ["no_vla_no_guides"]}


def _cluster_up() -> str | None:
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "no SLURM client tools (sinfo, sbatch) on PATH"
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0 or not re.search(r"idle|mix|alloc", proc.stdout):
        return f"no SLURM node is up: {(proc.stdout + proc.stderr).strip()}"
    return None


@pytest.fixture(scope="module")
def slurm_run(new_workflow):
    problem = _cluster_up()
    if problem:
        pytest.fail(f"{problem}; set one up with `sudo workflow/slurm/setup_local_slurm.sh`")
    wf = new_workflow()
    config = yaml.safe_load((wf / "config.yaml").read_text())
    config.update(TINY)
    (wf / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = subprocess.run([str(BIN / "snakemake"), "--workflow-profile", "workflow/profiles/slurm"], cwd=wf,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    print(proc.stdout[-6000:])
    return wf, proc


def test_the_grid_runs_through_slurm(slurm_run):
    wf, proc = slurm_run
    assert proc.returncode == 0, proc.stdout[-6000:]
    submitted = re.findall(r"Job \d+ has been submitted with SLURM jobid (\d+)", proc.stdout)
    assert len(submitted) == 2, proc.stdout[-6000:]  # the episodes; ingest, report, figures are local rules
    [run_id] = re.findall(r"SLURM run ID: (\S+)", proc.stdout)
    states = subprocess.run(["squeue", "-h", "--states=all", "--name", run_id, "-o", "%i %T"],
                            capture_output=True, text=True).stdout.split()
    assert dict(zip(states[::2], states[1::2])) == {job: "COMPLETED" for job in submitted}


def test_traces_and_database_from_the_cluster_run(slurm_run):
    wf, proc = slurm_run
    assert proc.returncode == 0
    traces = sorted(wf.glob("results/episodes/libero_pro/no_vla_no_guides/*/libero_spatial_swap/0/seed0"))
    assert [t.parent.parent.parent.name for t in traces] == ["code", "tool"]
    for t in traces:
        episode = json.loads((t / "episode.json").read_text())
        assert episode["status"] == "solved" and episode["success"], episode
    con = duckdb.connect(str(wf / "results" / "traces.duckdb"), read_only=True)
    rows = con.execute("SELECT agent, status, n_calls FROM episodes ORDER BY agent").fetchall()
    con.close()
    assert [(a, s) for a, s, _ in rows] == [("code", "solved"), ("tool", "solved")]
    assert rows[0][2] < rows[1][2]  # code cells need fewer LLM calls
    assert (wf / "results" / "tables" / "success.csv").exists() and any((wf / "figures").glob("*.png"))
