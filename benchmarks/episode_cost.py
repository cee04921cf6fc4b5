"""The fixed cost and the peak memory of one LIBERO-PRO episode, measured in one run.

    .venv/bin/python benchmarks/episode_cost.py [--task libero_spatial_swap/0] [--seed 0] [--repeats 3]
                                                [--agent tool] [--ablation no_vla] [--json out.json]

Prints, as medians over `--repeats` fresh processes that find the scene cache
(robots/scene_cache.py) a first, cold build filled (its parts in brackets):
* the fixed cost of an episode's runtime child, in parts: interpreter and
  imports, the environment build (of which: MuJoCo's compile of the scene XML
  or the load of a stored compiled model, and the offscreen GL context with
  its texture upload), reset and init state, settling, the first camera image;
* the fixed cost as the agent loop sees it: spawning the runtime child until
  its `init` reply (the scene built, reset, settled, first image), and the
  child's resident memory at that point (`VmRSS`, `VmHWM` of
  /proc/<pid>/status);
* one whole episode with the scripted planner: the runtime child's peak
  resident memory (`VmHWM`, read just before it is closed), the agent-loop
  process's own, the episode's wall time and its LLM calls.
Run it before and after a change, on the same instance, with `uptime` beside it:
the timings move with the machine's load, the memory does not.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS / VmHWM / RssAnon / RssFile of a process, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) // 1024
    return out


def _timing(fn, parts: dict[str, float], label: str):
    """fn, with its wall time added to parts[label] on each call."""

    def wrapper(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            parts[label] = parts.get(label, 0.0) + time.perf_counter() - t

    return wrapper


def _timed(owner, name: str, parts: dict[str, float], label: str) -> None:
    """Replace owner.name (a function, method or classmethod) by its timed version."""
    attr = owner.__dict__[name]
    if isinstance(attr, classmethod):
        setattr(owner, name, classmethod(_timing(attr.__func__, parts, label)))
    else:
        setattr(owner, name, _timing(attr, parts, label))


def child_parts(task: str, seed: int) -> dict[str, float]:
    """In a fresh process: the parts of what the runtime child's `init` does (seconds), and its memory."""
    t0 = time.perf_counter()
    from agents.runtime import png_bytes
    from robots.factory import make_backend
    import robots.libero_pro as lp

    backend = make_backend("libero_pro")
    parts: dict[str, float] = {"imports": time.perf_counter() - t0}
    import robosuite.utils.binding_utils as bu

    try:
        import robots.scene_cache as scene_cache
    except ImportError:  # before the scene cache: MuJoCo's compile is all there is
        _timed(bu.MjSim, "from_xml_string", parts, "compile")
    else:
        _timed(scene_cache, "compiled_model", parts, "compile")
    _timed(bu.MjRenderContext, "_set_mujoco_context_and_buffers", parts, "gl_context")
    _timed(lp.LiberoProBackend, "_make_env", parts, "build")
    _timed(lp, "settle", parts, "settle")
    t = time.perf_counter()
    backend.reset(task, seed)
    total = time.perf_counter() - t
    parts["reset"] = total - parts["build"] - parts["settle"]
    t = time.perf_counter()
    png_bytes(backend.render("agentview", "rgb", 256))
    parts["first_image"] = time.perf_counter() - t
    parts.update({f"mem_{k}": v for k, v in proc_status().items()})
    return parts


def runtime_init(task: str, seed: int) -> dict[str, float]:
    """Spawn a runtime child, init it as an episode does, read its memory, close it."""
    from agents.runtime import RuntimeClient

    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        rt = RuntimeClient(d)
        rt.deadline = time.monotonic() + 600
        rt.request("init", {"benchmark": "libero_pro", "task": task, "seed": seed, "capabilities": ("vla",),
                            "guides": True, "image_size": 256, "initial_cameras": ("agentview",)})
        out = {"init_s": time.perf_counter() - t, **{f"init_{k}": v for k, v in proc_status(rt.proc.pid).items()}}
        rt.close()
    return out


def whole_episode(task: str, seed: int, agent: str, ablation: str) -> dict[str, float]:
    """One scripted episode in this process; the runtime child's VmHWM is read just before it is closed."""
    import agents.runtime as runtime
    from agents.episode import EpisodeSpec, run_episode
    from agents.planners.scripted import ScriptedPlanner

    seen: dict[str, int] = {}
    real_close = runtime.RuntimeClient.close

    def close(self):
        if self.proc.poll() is None:
            seen.update(proc_status(self.proc.pid))
        real_close(self)

    runtime.RuntimeClient.close = close
    try:
        with tempfile.TemporaryDirectory() as d:
            spec = EpisodeSpec(benchmark="libero_pro", task=task, seed=seed, agent=agent, ablation=ablation)
            rec = run_episode(spec, ScriptedPlanner(), d)
    finally:
        runtime.RuntimeClient.close = real_close
    return {"episode_wall_s": rec.wall_time_s, "episode_calls": rec.n_calls, "episode_success": int(rec.success),
            "episode_child_VmHWM": seen.get("VmHWM", -1), "episode_parent_VmHWM": proc_status()["VmHWM"]}


def _fresh(mode: str, args) -> dict[str, float]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--task", args.task, "--seed", str(args.seed),
           "--agent", args.agent, "--ablation", args.ablation]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"{mode} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="libero_spatial_swap/0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--agent", default="tool")
    p.add_argument("--ablation", default="no_vla")
    p.add_argument("--json", default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    if args.child:
        fn = {"parts": lambda: child_parts(args.task, args.seed), "init": lambda: runtime_init(args.task, args.seed),
              "episode": lambda: whole_episode(args.task, args.seed, args.agent, args.ablation)}[args.child]
        print(json.dumps(fn()))
        return
    print(f"# {args.task} seed {args.seed}; load at start: {os.getloadavg()[0]:.2f}", flush=True)
    # A cache of its own: the first build is cold (textures downscaled, model compiled and stored),
    # the later ones find what it stored, as every later episode of a task does.
    cache = tempfile.TemporaryDirectory(prefix="cellbench-cache-")
    os.environ["CELLBENCH_CACHE"] = cache.name
    runs: dict[str, list[float]] = {}
    cold: dict[str, float] = {}
    for r in range(args.repeats + 1):
        for mode in ("parts", "init", "episode"):
            for k, v in _fresh(mode, args).items():
                if r == 0 and mode == "parts":
                    cold[k] = v
                else:
                    runs.setdefault(k, []).append(v)
        print(f"  {'cold build' if r == 0 else f'repeat {r}/{args.repeats}'} done (load {os.getloadavg()[0]:.2f})",
              file=sys.stderr, flush=True)
    cache.cleanup()
    med = {k: statistics.median(v) for k, v in runs.items()}
    rows = [
        ("interpreter + imports (in-process part)", "imports", "s"),
        ("environment build", "build", "s"),
        ("  of which MuJoCo compile of the scene XML (or load of the stored model)", "compile", "s"),
        ("  of which offscreen GL context + textures", "gl_context", "s"),
        ("reset + init state", "reset", "s"),
        ("settle", "settle", "s"),
        ("first image (agentview rgb + PNG)", "first_image", "s"),
        ("runtime child spawn -> init reply (what an episode pays)", "init_s", "s"),
        ("child VmRSS after init", "init_VmRSS", "MiB"),
        ("child VmHWM after init", "init_VmHWM", "MiB"),
        ("  RssAnon / RssFile after init", "init_RssAnon", "MiB"),
        (f"whole episode ({args.agent}/{args.ablation}): child peak VmHWM", "episode_child_VmHWM", "MiB"),
        ("whole episode: agent-loop process VmHWM", "episode_parent_VmHWM", "MiB"),
        ("whole episode: wall time", "episode_wall_s", "s"),
        ("whole episode: LLM calls / success", "episode_calls", ""),
    ]
    for label, key, unit in rows:
        if key not in med:
            print(f"{label:72s} {'-':>8s}")
            continue
        extra = ""
        if key == "init_RssAnon":
            extra = f" / {med.get('init_RssFile', 0):.0f}"
        if key == "episode_calls":
            extra = f" / {med.get('episode_success', 0):.0f}"
        first = f"  (cold: {cold[key]:.2f})" if key in cold and not key.startswith("mem_") else ""
        print(f"{label:72s} {med[key]:8.2f}{extra} {unit}{first}")
    print(f"# load at end: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"median": med, "cold": cold, "runs": runs, "task": args.task, "seed": args.seed}, f, indent=1)


if __name__ == "__main__":
    main()
