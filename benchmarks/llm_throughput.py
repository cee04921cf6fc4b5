"""Throughput of LLM-bound LIBERO-PRO episodes through the rehearsal endpoint, at rising concurrency.

    .venv/bin/python benchmarks/llm_throughput.py [--latency-s 5] [--concurrency 1,4,12] [--per-level 2]
        [--task libero_spatial_swap/0] [--agent tool] [--ablation no_vla] [--json out.json]

Starts `cellbench serve --latency-s L` (the scripted planner's replies, each
L seconds after its request) and, for each concurrency C, runs K = per-level
x C episodes as `cellbench play --planner openai` processes (what a workflow
job runs), at most C at once, a new one starting as one ends.  Prints, per
level, measured in this one run:
* episodes per hour, and the ideal rate for that latency: C / the mean
  latency-bound time of an episode (its LLM calls x L: what it would take if
  nothing but the endpoint cost time), and their ratio, over the whole level
  and after its first wave (whose C episodes start, and build, at once);
* peak resident memory per episode (agent loop + runtime child, VmHWM, the
  largest seen), and how many episodes ended killed or in error;
* where each `cellbench play` process's life went (start-up, scene build to
  the first LLM call, the episode, exit), and how long it and its runtime
  child ran on a CPU and waited for one (/proc/<pid>/schedstat, sampled);
* CPU utilisation: the episodes' and the endpoint's CPU seconds over the
  level's wall time (in cores), the machine's load average and how much of
  the time runnable tasks waited for a CPU (other work on the machine included);
C levels above what memory allows (80 % of MemAvailable / the peak per
episode measured at the first level) are skipped, and said so.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CELLBENCH = Path(sys.executable).parent / "cellbench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hwm_mib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _schedstat(pid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of a process so far (/proc/<pid>/schedstat)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            on_cpu, waited = f.read().split()[:2]
        return int(on_cpu) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return None


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_pressure() -> float | None:
    """Share of the last 60 s in which some runnable task waited for a CPU (/proc/pressure/cpu), percent."""
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().split("avg60=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None


def mem_available_mib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


class Episode:
    """One `cellbench play` process and the peak memory seen of it and its runtime child."""

    def __init__(self, args, base_url: str, out: Path, index: int):
        self.out = out / f"ep{index:03d}"
        env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "rehearsal", "MUJOCO_GL": "egl"}
        cmd = [str(CELLBENCH), "play", "--task", args.task, "--seed", str(args.seed), "--agent", args.agent,
               "--ablation", args.ablation, "--planner", "openai", "--model", "scripted-v1", "--out", str(self.out)]
        self.log = open(out / f"ep{index:03d}.log", "wb")
        self.spawned = time.time()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.peak = {"parent": 0, "child": 0}
        self.exited = None
        self.sched: dict[int, tuple[float, float]] = {}

    def poll(self) -> None:
        """Peak memory so far, and the CPU and run-queue wait of the process and its runtime child."""
        self.peak["parent"] = max(self.peak["parent"], _hwm_mib(self.proc.pid))
        for pid in [self.proc.pid, *_children(self.proc.pid)]:
            if pid != self.proc.pid:
                self.peak["child"] = max(self.peak["child"], _hwm_mib(pid))
            sched = _schedstat(pid)
            if sched is not None:
                self.sched[pid] = sched

    def result(self) -> dict:
        self.log.close()
        record = self.out / "episode.json"
        rec = json.loads(record.read_text()) if record.exists() else {}
        first_call = None
        calls = self.out / "calls.jsonl"
        if calls.exists() and calls.read_text().strip():
            first_call = json.loads(calls.read_text().splitlines()[0])["started_at"]
        start, end = rec.get("started_at", self.spawned), rec.get("finished_at", self.exited)
        return {"returncode": self.proc.returncode, "status": rec.get("status", "no episode.json"),
                "success": rec.get("success"), "n_calls": rec.get("n_calls", 0),
                "wall_time_s": rec.get("wall_time_s"), "peak_mib": self.peak["parent"] + self.peak["child"],
                "child_peak_mib": self.peak["child"],
                # Where a process's life went: start-up before the episode's clock, the scene build until
                # the first LLM call, the episode's calls, and the exit after its record is written.
                "on_cpu_s": sum(s[0] for s in self.sched.values()),
                "cpu_wait_s": sum(s[1] for s in self.sched.values()),
                "process_s": self.exited - self.spawned, "startup_s": start - self.spawned,
                "to_first_call_s": (first_call - start) if first_call else None, "exit_s": self.exited - end}


def run_level(args, base_url: str, server_pid: int, concurrency: int, n: int, work: Path) -> dict:
    out = work / f"c{concurrency}"
    out.mkdir()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu0 = _cpu_s(server_pid)
    running: list[Episode] = []
    done: list[dict] = []
    started = 0
    t0 = time.monotonic()
    while len(done) < n:
        while len(running) < concurrency and started < n:
            running.append(Episode(args, base_url, out, started))
            started += 1
        time.sleep(0.25)
        for ep in list(running):
            ep.poll()
            if ep.proc.poll() is not None:
                ep.exited = time.time()
                running.remove(ep)
                done.append(ep.result())
                done[-1]["done_at"] = time.monotonic() - t0
                print(f"    episode {len(done)}/{n}: {done[-1]['status']}, {done[-1]['n_calls']} calls, "
                      f"{done[-1]['wall_time_s']} s, peak {done[-1]['peak_mib']} MiB", file=sys.stderr, flush=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    episodes_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    server_cpu = _cpu_s(server_pid) - server_cpu0
    latency_bound = statistics.mean(d["n_calls"] * args.latency_s for d in done)
    rate = n / wall * 3600
    ideal = concurrency / latency_bound * 3600 if latency_bound else float("nan")
    # After the first wave: the first C episodes start together (and pay their start-up at once); from
    # the C-th completion on, the rate is the steady one a long grid runs at.
    ends = sorted(d["done_at"] for d in done)
    steady = (n - concurrency) / (ends[-1] - ends[concurrency - 1]) * 3600 if n > concurrency else float("nan")
    bad = [d for d in done if d["returncode"] != 0 or d["status"] in ("error", "wall_clock", "no episode.json")]
    return {
        "concurrency": concurrency, "episodes": n, "wall_s": wall, "episodes_per_hour": rate,
        "ideal_per_hour": ideal, "ratio": rate / ideal, "steady_per_hour": steady, "steady_ratio": steady / ideal, "mean_calls": statistics.mean(d["n_calls"] for d in done),
        "latency_bound_s": latency_bound, "mean_episode_wall_s": statistics.mean(d["wall_time_s"] or 0 for d in done),
        "mean_process_s": statistics.mean(d["process_s"] for d in done),
        "mean_startup_s": statistics.mean(d["startup_s"] for d in done),
        "mean_to_first_call_s": statistics.mean(d["to_first_call_s"] or 0 for d in done),
        "mean_exit_s": statistics.mean(d["exit_s"] for d in done),
        "mean_on_cpu_s": statistics.mean(d["on_cpu_s"] for d in done),
        "mean_cpu_wait_s": statistics.mean(d["cpu_wait_s"] for d in done),
        "peak_mib_max": max(d["peak_mib"] for d in done), "child_peak_mib_max": max(d["child_peak_mib"] for d in done),
        "failed": len(bad), "statuses": sorted({d["status"] for d in done}),
        "success": sum(bool(d["success"]) for d in done),
        "cpu_cores_episodes": episodes_cpu / wall, "cpu_cores_endpoint": server_cpu / wall,
        "load_avg_end": os.getloadavg()[0], "cpu_pressure_avg60": cpu_pressure(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency-s", type=float, default=5.0)
    p.add_argument("--jitter-s", type=float, default=0.0, help="latency drawn uniformly from latency +- jitter")
    p.add_argument("--concurrency", default="1,2,4,8,12,16")
    p.add_argument("--per-level", type=int, default=2, help="episodes per level = this x concurrency")
    p.add_argument("--task", default="libero_spatial_swap/0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agent", default="tool")
    p.add_argument("--ablation", default="no_vla")
    p.add_argument("--memory-fraction", type=float, default=0.8, help="of MemAvailable the episodes may take")
    p.add_argument("--json", default=None)
    p.add_argument("--keep", default=None, help="keep the episodes' traces in this directory")
    args = p.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    port = _free_port()
    server = subprocess.Popen([str(CELLBENCH), "serve", "--port", str(port), "--latency-s", str(args.latency_s),
                               "--jitter-s", str(args.jitter_s), "--quiet"], cwd=ROOT, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    print(f"# {args.task} seed {args.seed}, {args.agent}/{args.ablation}, {args.latency_s:g} s per call; "
          f"{os.cpu_count()} CPUs, MemAvailable {mem_available_mib()} MiB, load {os.getloadavg()[0]:.2f} "
          f"(uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()})", flush=True)
    rows = []
    cap = None
    try:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
        scratch = (contextlib.nullcontext(tempfile.mkdtemp(prefix="llm-throughput-", dir=args.keep)) if args.keep
                   else tempfile.TemporaryDirectory(prefix="llm-throughput-"))
        with scratch as work:
            for c in levels:
                if cap is not None and c > cap:
                    print(f"  concurrency {c}: skipped, memory allows {cap} "
                          f"({args.memory_fraction:.0%} of {mem_available_mib()} MiB / {rows[0]['peak_mib_max']} MiB)")
                    continue
                n = max(args.per_level * c, 2)
                print(f"  concurrency {c}: {n} episodes ...", file=sys.stderr, flush=True)
                rows.append(run_level(args, base_url, server.pid, c, n, Path(work)))
                if cap is None:
                    cap = int(args.memory_fraction * mem_available_mib() / rows[0]["peak_mib_max"])
    finally:
        server.terminate()
        server.wait()
    head = (f"{'C':>3} {'eps':>4} {'wall s':>7} {'ep/h':>7} {'ideal/h':>8} {'ratio':>6} {'steady':>6} {'calls':>6} "
            f"{'ep wall s':>9} {'peak MiB':>8} {'failed':>6} {'CPU eps':>7} {'CPU srv':>7} {'load':>5} {'CPU wait':>8}")
    print(head)
    for r in rows:
        print(f"{r['concurrency']:>3} {r['episodes']:>4} {r['wall_s']:>7.0f} {r['episodes_per_hour']:>7.1f} "
              f"{r['ideal_per_hour']:>8.1f} {r['ratio']:>6.2f} {r['steady_ratio']:>6.2f} {r['mean_calls']:>6.1f} {r['mean_episode_wall_s']:>9.1f} "
              f"{r['peak_mib_max']:>8} {r['failed']:>6} {r['cpu_cores_episodes']:>7.2f} {r['cpu_cores_endpoint']:>7.2f} "
              f"{r['load_avg_end']:>5.1f} {(r['cpu_pressure_avg60'] or 0):>7.0f}%")
    print("per process, mean s: " + "; ".join(
        f"C={r['concurrency']}: start-up {r['mean_startup_s']:.1f}, build to first call {r['mean_to_first_call_s']:.1f}, "
        f"episode {r['mean_episode_wall_s']:.1f}, exit {r['mean_exit_s']:.1f} (process {r['mean_process_s']:.1f}; "
        f"on a CPU {r['mean_on_cpu_s']:.1f}, runnable but waiting for one {r['mean_cpu_wait_s']:.1f})"
        for r in rows))
    print("steady = the ratio after the first wave (from the C-th episode's end to the last's); ratio = episodes/hour / ideal; ideal = C / (mean LLM calls x latency); CPU in cores (CPU-s / wall s); "
          "peak = agent loop + runtime child VmHWM; load and CPU wait (/proc/pressure/cpu some avg60) at the "
          "level's end: the machine's, other work included")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "levels": rows}, indent=1))


if __name__ == "__main__":
    main()
