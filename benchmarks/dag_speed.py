"""How fast Snakemake plans (and, optionally, runs) cellbench's episode grid.

    .venv/bin/python benchmarks/dag_speed.py               # dry runs: default and paper grid
    .venv/bin/python benchmarks/dag_speed.py --execute 2000 [--scheduler ilp]

Dry runs time `snakemake -n` on the default config and on configs/paper.yaml
(goal: <= 60 s) in a fresh copy of the workflow, so no earlier run's metadata
or traces are involved; the per-job planning cost is the difference of the
two over the difference of their job counts.  `--execute N` really runs a
grid of N episode jobs whose `cellbench` is a stub that only writes
episode.json, which isolates Snakemake's own per-job cost (scheduling, job
start, bookkeeping) from the simulator's.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = Path(sys.executable).parent / "snakemake"

STUB = """#!/bin/sh
# cellbench stand-in: writes what each command would, nothing more (`play`
# first sleeps $CELLBENCH_STUB_EPISODE_S seconds, default 0, like an episode).
cmd=$1; shift
while [ $# -gt 0 ]; do
  case $1 in --out) out=$2; shift;; --db) db=$2; shift;; esac; shift
done
case $cmd in
  play) sleep "${CELLBENCH_STUB_EPISODE_S:-0}"; mkdir -p "$out" && echo '{}' > "$out/episode.json";;
  ingest) echo stub > "$db";;
  *) mkdir -p "$out";;
esac
"""


def copy_workflow(dest: Path) -> None:
    for name in ("Snakefile", "config.yaml", "workflow", "configs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    (dest / "profiles").symlink_to("workflow/profiles")


def snakemake(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    """Run snakemake; return (wall seconds, number of jobs it planned or ran)."""
    t0 = time.perf_counter()
    proc = subprocess.run([str(SNAKEMAKE), *args], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"snakemake {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    total = [line.split()[1] for line in (proc.stdout + proc.stderr).splitlines()
             if line.startswith("total ") and line.split()[1].isdigit()]
    return wall, int(total[0]) if total else 0


def synthetic_config(n_episodes: int, path: Path) -> int:
    """A config whose grid has about `n_episodes` episodes (9 per instance)."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    suites = [f"libero_{b}_{p}" for b in ("spatial", "object", "goal", "10")
              for p in ("swap", "lan", "object", "task")]
    tasks = [f"{s}/{i}" for s in suites for i in range(10)]
    instances = max(1, round(n_episodes / 9))
    n_seeds = -(-instances // len(tasks))
    config["benchmarks"]["libero_pro"]["tasks"] = tasks[: -(-instances // n_seeds)]
    config["benchmarks"]["libero_pro"]["seeds"] = list(range(n_seeds))
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return len(config["benchmarks"]["libero_pro"]["tasks"]) * n_seeds * 9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--execute", type=int, default=0, metavar="N",
                    help="also run a stubbed grid of about N episode jobs")
    ap.add_argument("--scheduler", default="greedy", help="scheduler for --execute (greedy | ilp)")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="cellbench-dag-") as tmp:
        work = Path(tmp)
        copy_workflow(work)
        snakemake(["-n"], work)  # warm the filesystem and bytecode caches
        t_small, n_small = snakemake(["-n"], work)
        t_paper, n_paper = snakemake(["-n", "--configfile", "configs/paper.yaml"], work)
        per_job_ms = 1000 * (t_paper - t_small) / max(1, n_paper - n_small)
        print(f"snakemake -n (config.yaml):                        {t_small:6.2f} s  {n_small:6d} jobs")
        print(f"snakemake -n --configfile configs/paper.yaml:      {t_paper:6.2f} s  {n_paper:6d} jobs"
              f"  ({'within' if t_paper <= 60 else 'OVER'} the 60 s goal)")
        print(f"planning cost per extra job:                       {per_job_ms:6.2f} ms")

        if args.execute:
            stub_dir = work / "stub"
            stub_dir.mkdir()
            (stub_dir / "cellbench").write_text(STUB)
            (stub_dir / "cellbench").chmod(0o755)
            env = {**os.environ, "PATH": f"{stub_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
            n = synthetic_config(args.execute, work / "synthetic.yaml")
            common = ["--configfile", "synthetic.yaml", "--cores", str(args.cores),
                      "--scheduler", args.scheduler, "--quiet", "all"]
            t_plan, _ = snakemake(["-n", *common], work, env)
            t_run, _ = snakemake(common, work, env)
            print(f"run {n} stub episodes, {args.scheduler}, {args.cores} cores:".ljust(51)
                  + f"{t_run:6.2f} s  ({1000 * (t_run - t_plan) / n:.1f} ms per job beyond planning,"
                  f" {n / (t_run - t_plan):.0f} jobs/s)")


if __name__ == "__main__":
    main()
