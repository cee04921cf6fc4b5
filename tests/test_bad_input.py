"""Bad input through the real command line: one clear message naming the thing, non-zero exit where fatal.

Config errors, unknown benchmarks and tasks, corrupt or truncated traces and
duplicate episodes, each through `cellbench` (or `snakemake`) as a user meets
it.  The function-level checks behind them live in test_config.py,
test_analysis_ingest.py and test_analysis_stats.py; here it is the exit
status, the one message, and that nothing half-made is left behind.  No scene
is built (an unknown task is refused before the simulator starts).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trace_factory import write_config, write_episode, write_pair

CLI = str(Path(sys.executable).parent / "cellbench")
TASK = "libero_spatial_swap/0"


def cellbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def one_error(proc: subprocess.CompletedProcess, command: str) -> str:
    """The single `cellbench COMMAND: error:` message of a failed command (no traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith(f"cellbench {command}: error:")]
    assert len(errors) == 1, proc.stderr
    return proc.stderr[proc.stderr.index(errors[0]):]


@pytest.mark.parametrize("args, message", [
    (["--task", "nope/0"], "unknown LIBERO-PRO suite 'nope'"),
    (["--task", "libero_spatial_swap/99"], "task 'libero_spatial_swap/99': suite libero_spatial_swap has tasks 0..9"),
    (["--task", "libero_spatial_swap"], "task id 'libero_spatial_swap' must be 'suite/index'"),
    (["--task", TASK, "--benchmark", "nope"], "unknown benchmark 'nope'; known: libero_pro"),
    (["--task", TASK, "--benchmark", "kitchen_atomic"], "group kitchen_atomic draws from libero_90, libero_10"),
    (["--task", TASK, "--ablation", "no_eyes"], "unknown ablation 'no_eyes'"),
])
def test_play_refuses_unknown_benchmarks_and_tasks_without_a_trace(tmp_path, args, message):
    out = tmp_path / "trace"
    proc = cellbench("play", "--agent", "tool", *args, "--out", str(out))
    assert proc.returncode == 2
    assert message in one_error(proc, "play")
    assert not out.exists()  # an unknown task is no episode: no error trace to ingest


def test_play_names_the_config_file_and_key(tmp_path):
    config = yaml.safe_load(write_config(tmp_path / "config.yaml").read_text())
    config["episode"] = {"wall_clock": 60}
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "broken.yaml").write_text("benchmarks: [unclosed\n")
    for name, message in [("typo.yaml", "typo.yaml: episode: unknown key 'wall_clock' (did you mean 'wall_clock_s'?)"),
                          ("broken.yaml", "broken.yaml: not valid YAML"),
                          ("missing.yaml", "missing.yaml: config file not found")]:
        out = tmp_path / f"trace_{name}"
        proc = cellbench("play", "--task", TASK, "--agent", "code", "--config", str(tmp_path / name),
                         "--out", str(out))
        assert proc.returncode == 2, name
        assert message in one_error(proc, "play"), name
        assert not out.exists()


def test_report_names_a_bad_config(tmp_path):
    results = tmp_path / "episodes"
    write_pair(results, tool={"success": True, "solved_at_call": 1})
    config = write_config(tmp_path / "config.yaml")
    assert cellbench("ingest", "--results", str(results), "--db", str(tmp_path / "t.duckdb"),
                     cwd=tmp_path).returncode == 0
    text = config.read_text().replace("price_model: astra", "price_model: gpt-99")
    (tmp_path / "bad.yaml").write_text(text)
    proc = cellbench("report", "--db", str(tmp_path / "t.duckdb"), "--out", str(tmp_path / "tables"),
                     "--config", str(tmp_path / "bad.yaml"))
    assert proc.returncode == 2
    assert "bad.yaml: price_model: 'gpt-99' has no price table" in one_error(proc, "report")


def test_report_refuses_a_duplicate_episode_naming_it(tmp_path):
    results = tmp_path / "episodes"
    tool, _ = write_pair(results, tool={"success": True, "solved_at_call": 1})
    # The same instance again under another directory (a copied trace).
    copy = write_episode(results, agent="tool", trace_dir=tool.parent / "seed0_copy")
    db = tmp_path / "t.duckdb"
    assert cellbench("ingest", "--results", str(results), "--db", str(db), cwd=tmp_path).returncode == 0
    proc = cellbench("report", "--db", str(db), "--out", str(tmp_path / "tables"),
                     "--config", str(write_config(tmp_path / "config.yaml")))
    assert proc.returncode == 2
    message = one_error(proc, "report")
    assert "libero_pro libero_spatial_swap/0 seed 0" in message and "duplicate tool episodes" in message
    assert str(tool) in message and str(copy) in message
    assert not (tmp_path / "tables").exists()


DAMAGES = [  # (what is done to a trace, the file named, the problem named)
    (lambda d: (d / "calls.jsonl").write_text((d / "calls.jsonl").read_text()[:-20]), "calls.jsonl:1",
     "not valid JSON"),
    (lambda d: (d / "episode.json").write_text((d / "episode.json").read_text()[:30]), "episode.json",
     "not valid JSON"),
    (lambda d: (d / "primitives.jsonl").write_text('{"call_index": 1}\n'), "primitives.jsonl:1", "missing field"),
]


def test_ingest_names_each_corrupt_trace_and_strict_fails(tmp_path):
    results = tmp_path / "episodes"
    pairs = [write_pair(results, seed=seed, tool={"success": True, "solved_at_call": 1}) for seed in range(3)]
    for (tool, _), (damage, _, _) in zip(pairs, DAMAGES):
        damage(tool)
    db = tmp_path / "t.duckdb"
    proc = cellbench("ingest", "--results", str(results), "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 0  # by hand, the rest still loads
    lines = [x for x in proc.stderr.splitlines() if x.startswith("skipped corrupt trace:")]
    for (tool, _), (_, file, problem) in zip(pairs, DAMAGES):
        [line] = [x for x in lines if f" {tool}/" in x]
        assert line.startswith(f"skipped corrupt trace: {tool}/{file}: {problem}"), line
    assert "3 corrupt skipped" in proc.stderr
    proc = cellbench("ingest", "--strict", "--results", str(results), "--db", str(db), cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.count("skipped corrupt trace: ") == 3
    # The report will not pair what is left: the instances are named, not silently dropped.
    proc = cellbench("report", "--db", str(db), "--out", str(tmp_path / "tables"),
                     "--config", str(write_config(tmp_path / "config.yaml")))
    assert proc.returncode == 2
    message = one_error(proc, "report")
    assert all(f"no tool episode to pair with {code}" in message for _, code in pairs)


def test_missing_inputs_are_named(tmp_path):
    proc = cellbench("ingest", "--results", str(tmp_path / "nowhere"), "--db", str(tmp_path / "t.duckdb"))
    assert proc.returncode == 2 and "nowhere not found" in one_error(proc, "ingest")
    proc = cellbench("report", "--db", str(tmp_path / "none.duckdb"), "--config",
                     str(write_config(tmp_path / "config.yaml")))
    assert proc.returncode == 2 and "none.duckdb not found" in one_error(proc, "report")
    proc = cellbench("view", str(tmp_path))
    assert proc.returncode == 2 and "is not an episode trace directory" in one_error(proc, "view")


def test_snakemake_names_an_unknown_task_in_the_config(workflow_copy, snakemake):
    config = yaml.safe_load((workflow_copy / "config.yaml").read_text())
    config["benchmarks"]["libero_pro"]["tasks"] = [TASK, "libero_spatial_swapp/1", "libero_spatial_swap/10"]
    (workflow_copy / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = snakemake(workflow_copy, "-n")
    assert proc.returncode != 0
    assert "config.yaml: benchmarks.libero_pro.tasks[1]: unknown LIBERO-PRO suite 'libero_spatial_swapp'" in proc.stdout
    assert ("config.yaml: benchmarks.libero_pro.tasks[2]: task 'libero_spatial_swap/10': suite libero_spatial_swap "
            "has tasks 0..9") in proc.stdout


def test_the_workflows_ingest_stops_on_a_corrupt_trace(workflow_copy, snakemake):
    """`snakemake figures` over traces on disk: the corrupt one is named and no tables are made."""
    results = workflow_copy / "results" / "episodes"
    tool, _ = write_pair(results, tool={"success": True, "solved_at_call": 1})
    (tool / "calls.jsonl").write_text('{"call_index": 1, "started_at"')
    proc = snakemake(workflow_copy, "figures")
    assert proc.returncode != 0
    log = (workflow_copy / "logs" / "ingest.log").read_text()
    assert f"skipped corrupt trace: results/episodes/{tool.relative_to(results)}/calls.jsonl:1: not valid JSON" in log
    assert not (workflow_copy / "results" / "tables").exists()
