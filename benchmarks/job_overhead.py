"""Scheduling overhead per episode job, locally and on SLURM, against an episode's own time.

    .venv/bin/python benchmarks/job_overhead.py [--episodes 20] [--episode-s 5] [--group 4] [--no-slurm]

Runs a grid of N episode jobs whose `cellbench play` is a stub that sleeps
`--episode-s` seconds and writes episode.json (ingest, report and figures are
stubs too), so what is measured is Snakemake's and the executor's own cost:
  * local: the default profile, all cores;
  * slurm: the slurm profile (workflow/profiles/slurm) on the cluster `sinfo`
    reaches (a local one: workflow/slurm/setup_local_slurm.sh), one sbatch
    job per episode;
  * slurm, grouped: the same with `--groups episode=episodes
    --group-components episodes=K`, K episodes per sbatch job.
For each: wall time, the ideal wall time (N episodes of S seconds on the
slots the executor had), and the overhead per episode job, which the table
sets against the mean wall time of real episodes (--real-s: 20-70 s measured
here with the scripted planner; the paper's LLM episodes take minutes).
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_speed import STUB, copy_workflow  # noqa: E402

SNAKEMAKE = Path(sys.executable).parent / "snakemake"

def grid_config(work: Path, n: int) -> int:
    """A config of about n episodes (tool and code in no_vla_no_guides: 2 per instance)."""
    config = yaml.safe_load((work / "config.yaml").read_text())
    seeds = max(1, math.ceil(n / 2 / 10))
    config["benchmarks"] = {"libero_pro": {"tasks": [f"libero_spatial_swap/{i}" for i in range(10)][: math.ceil(n / 2)],
                                           "seeds": list(range(seeds)), "call_budget": 40}}
    config["ablations"] = ["no_vla_no_guides"]
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return len(config["benchmarks"]["libero_pro"]["tasks"]) * seeds * 2


def slurm_cpus() -> tuple[int, int] | None:
    """(CPUs of the whole cluster `sinfo` reaches, CPUs of its smallest node), or None without one."""
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%c %D"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [(int(c.rstrip("+")), int(d)) for c, d in (line.split() for line in out.stdout.splitlines())]
    if out.returncode != 0 or not rows:
        return None
    return sum(c * d for c, d in rows), min(c for c, _ in rows)


def run(label: str, args: list[str], work: Path, env: dict, n: int, ideal: float) -> tuple[str, float, float, int]:
    shutil.rmtree(work / "results", ignore_errors=True)
    shutil.rmtree(work / ".snakemake", ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run([str(SNAKEMAKE), *args], cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{label} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    return label, wall, ideal, n


def ideal_s(n: int, episode_s: float, slots: int, group: int = 1, width: int = 1) -> float:
    """Wall time with no overhead: jobs of `group` episodes, `width` of them at a time inside a job,
    as many jobs at once as `slots` CPUs allow."""
    jobs, at_once = math.ceil(n / group), max(1, slots // width)
    return math.ceil(jobs / at_once) * math.ceil(group / width) * episode_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--episode-s", type=float, default=5.0, help="how long a stub episode sleeps")
    ap.add_argument("--group", type=int, default=4, help="episodes per sbatch job in the grouped SLURM run")
    ap.add_argument("--real-s", type=float, default=45.0, help="mean wall time of a real episode, to compare")
    ap.add_argument("--no-slurm", action="store_true")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))

    with tempfile.TemporaryDirectory(prefix="cellbench-jobs-") as tmp:
        work = Path(tmp)
        copy_workflow(work)
        n = grid_config(work, args.episodes)
        stub_dir = work / "stub"
        stub_dir.mkdir()
        (stub_dir / "cellbench").write_text(STUB)
        (stub_dir / "cellbench").chmod(0o755)
        env = {**os.environ, "PATH": f"{stub_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               "CELLBENCH_STUB_EPISODE_S": str(args.episode_s)}
        rows = [run(f"local, {cores} cores", ["--cores", str(cores), "--quiet", "all"], work, env, n,
                    ideal_s(n, args.episode_s, cores))]
        cluster = None if args.no_slurm else slurm_cpus()
        if cluster:
            total, per_node = cluster
            # --cores, on a cluster: the most CPUs one job may ask for.  A group of K one-CPU
            # episodes asks for K unless capped, and pends forever if no node has K.
            slurm = ["--workflow-profile", "workflow/profiles/slurm", "--cores", str(per_node), "--quiet", "all"]
            rows.append(run(f"slurm, 1 episode per job ({total} CPUs)", slurm, work, env, n,
                            ideal_s(n, args.episode_s, total)))
            # A group job asks for min(K, per_node) CPUs and runs that many episodes at a time.
            width = min(args.group, per_node)
            rows.append(run(f"slurm, {args.group} episodes per job ({width} at a time)", slurm + [
                "--groups", "episode=episodes", "--group-components", f"episodes={args.group}"],
                work, env, n, ideal_s(n, args.episode_s, total, args.group, width)))
        elif not args.no_slurm:
            print("(no SLURM cluster reachable: `sinfo` failed; see workflow/slurm/setup_local_slurm.sh)")

    print(f"{n} stub episode jobs of {args.episode_s:g} s each (+ ingest, report, figures stubs)")
    print(f"{'executor':<38} {'wall s':>8} {'ideal s':>8} {'overhead/episode s':>19} {'% of a real episode':>20}")
    for label, wall, ideal, n in rows:
        per = (wall - ideal) / n
        print(f"{label:<38} {wall:8.1f} {ideal:8.1f} {per:19.2f} {100 * per / args.real_s:19.1f}%")
    print(f"(a real episode: {args.real_s:g} s, --real-s)")


if __name__ == "__main__":
    main()
