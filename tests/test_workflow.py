"""The Snakemake DAG, through the real `snakemake` on scratch copies of the workflow.

Dry runs only (no simulator): the grid Snakemake plans, the `cellbench play`
command it would run, lint, config errors, and that `snakemake figures` works
from the traces on disk without planning a single episode.
"""
from __future__ import annotations

import os
import shlex
import time

import pytest

from agents.cli import _build_parser
from agents.config import config_hash, episode_grid, load_config


def job_counts(output: str) -> dict[str, int]:
    """The last 'Job stats' table of a snakemake run, as {rule: count}."""
    counts: dict[str, int] = {}
    table = None
    for line in output.splitlines():
        if line.startswith("Job stats:"):
            table = {}
            continue
        if table is not None:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                table[parts[0]] = int(parts[1])
            elif not parts and table:
                counts, table = table, None
    return table or counts


@pytest.fixture(scope="module")
def default_dry_run(new_workflow, snakemake):
    wf = new_workflow()
    proc = snakemake(wf, "-n", "-p")
    assert proc.returncode == 0, proc.stdout
    return wf, proc.stdout


def test_dry_run_plans_the_default_grid(default_dry_run, repo):
    wf, out = default_dry_run
    grid = episode_grid(load_config(repo / "config.yaml"))
    assert job_counts(out) == {"episode": len(grid), "ingest": 1, "report": 1, "figures": 1, "all": 1, "total": len(grid) + 4}
    planned = {line.split("output: ")[1] for line in out.splitlines() if "output: results/episodes/" in line}
    assert planned == {f"{e['trace_dir']}/episode.json" for e in grid}


def test_episode_command_is_one_cellbench_play_per_grid_cell(default_dry_run, repo):
    wf, out = default_dry_run
    grid = {e["trace_dir"]: e for e in episode_grid(load_config(repo / "config.yaml"))}
    commands = [line.split("Shell command: ", 1)[1] for line in out.splitlines()
                if line.startswith("Shell command: cellbench play")]
    assert len(commands) == len(grid)
    for command in commands:
        argv = shlex.split(command)
        argv = argv[: argv.index(">")]
        args = _build_parser().parse_args(argv[1:])
        cell = grid[args.out]
        assert (args.benchmark, args.task, args.seed, args.agent, args.ablation, args.repeat, args.call_budget) == (
            cell["benchmark"], cell["task"], cell["seed"], cell["agent"], cell["ablation"], cell["repeat"],
            cell["call_budget"])
        # The merged config the run uses, named by its hash, with defaults filled in.
        effective = load_config(wf / args.config)
        assert config_hash(effective) == config_hash(load_config(repo / "config.yaml"))
        assert os.path.basename(args.config) == config_hash(effective)[:16] + ".yaml"


def test_dry_run_plans_the_paper_grid(workflow_copy, snakemake, repo):
    proc = snakemake(workflow_copy, "-n", "--configfile", "configs/paper.yaml", "--quiet", "rules")
    assert proc.returncode == 0, proc.stdout[-3000:]
    grid = episode_grid(load_config(repo / "configs" / "paper.yaml"))
    # 700 instances per agent over the four groups (paper §3.4), each in its group's ablations (§3.7).
    assert job_counts(proc.stdout)["episode"] == len(grid) == 5400
    for agent in ("tool", "code"):
        instances = {(e["benchmark"], e["task"], e["seed"]) for e in grid if e["agent"] == agent}
        assert len(instances) == 700
    cells = {(e["benchmark"], e["agent"], e["ablation"]) for e in grid}
    grid_ablations = ("full", "no_vla", "no_guides", "no_vla_no_guides")
    for group in ("libero_pro", "bimanual", "kitchen_atomic"):
        assert {(group, agent, a) for agent in ("tool", "code") for a in grid_ablations} <= cells
    assert {c for c in cells if c[2] == "images_on_demand"} == {("libero_pro", "tool", "images_on_demand")}
    assert {c for c in cells if c[0] == "kitchen_composite"} == {
        ("kitchen_composite", agent, a) for agent in ("tool", "code") for a in ("full", "no_vla")}


def test_lint_is_clean(workflow_copy, snakemake):
    # Every rule names workflow/envs/cellbench.yaml for conda users; no lint may remain.
    proc = snakemake(workflow_copy, "--lint")
    lints = [line.strip() for line in proc.stdout.splitlines() if line.strip().startswith("* ")]
    assert proc.returncode == 0 and not lints, proc.stdout
    assert "Congratulations" in proc.stdout, proc.stdout


def test_a_typo_in_config_fails_naming_the_key(workflow_copy, snakemake):
    config = workflow_copy / "config.yaml"
    config.write_text(config.read_text().replace("    seeds: [", "    seedz: [", 1))
    proc = snakemake(workflow_copy, "-n")
    assert proc.returncode != 0
    assert "config.yaml: benchmarks.libero_pro: unknown key 'seedz' (did you mean 'seeds'?)" in proc.stdout


def _fake_traces(wf, trace_dirs):
    for d in trace_dirs:
        (wf / d).mkdir(parents=True)
        (wf / d / "episode.json").write_text("{}")


def test_figures_uses_the_traces_on_disk_and_never_plans_episodes(workflow_copy, snakemake, repo):
    wf = workflow_copy
    grid = episode_grid(load_config(repo / "config.yaml"))
    _fake_traces(wf, [e["trace_dir"] for e in grid[:3]])
    past = time.time() - 60
    for e in grid[:3]:
        os.utime(wf / e["trace_dir"] / "episode.json", (past, past))
    (wf / "results" / "traces.duckdb").write_text("")

    # The database is newer than every trace: only tables and figures to make,
    # even for a bigger grid and another planner than the traces were run with.
    for extra in ([], ["--configfile", "configs/paper.yaml", "--config", "planner={name: openai, model: m}"]):
        proc = snakemake(wf, "-n", *extra, "--", "figures")
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert job_counts(proc.stdout) == {"report": 1, "figures": 1, "total": 2}, extra

    # A trace newer than the database is ingested again; still no episodes.
    os.utime(wf / grid[0]["trace_dir"] / "episode.json")
    proc = snakemake(wf, "-n", "figures")
    assert job_counts(proc.stdout) == {"ingest": 1, "report": 1, "figures": 1, "total": 3}

    # A plain `snakemake` completes the grid first.
    proc = snakemake(wf, "-n")
    assert job_counts(proc.stdout)["episode"] == len(grid) - 3


def test_figures_without_traces_says_what_to_run(workflow_copy, snakemake):
    proc = snakemake(workflow_copy, "-n", "figures")
    assert proc.returncode != 0
    assert "no traces under results/episodes" in proc.stdout and "run `snakemake`" in proc.stdout


def test_figures_also_writes_the_results_browser(default_dry_run):
    """`snakemake figures` draws the site from the same database and shows the figures it just drew."""
    _, out = default_dry_run
    [line] = [l for l in out.splitlines() if "cellbench browse" in l]
    words = shlex.split(line[line.index("cellbench browse"):].split(")")[0])
    args = _build_parser().parse_args(words[1:])
    assert (args.command, args.db, args.out, args.figures) == ("browse", "results/traces.duckdb", "results/site",
                                                               "figures")
