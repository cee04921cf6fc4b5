"""`cellbench ingest` + `cellbench report` over 10^5 synthetic episodes, against DuckDB's raw scan of the same files.

    .venv/bin/python benchmarks/ingest_scale.py [--episodes 100000] [--dir DIR] [--workers N]
                                                [--cells unique|repeated] [--no-raw-scan]

Writes a synthetic results tree (default: a temporary directory, removed at
the end; `--dir` keeps and reuses it) with the real trace layout and schema:
one directory per episode, episode.json + calls.jsonl + primitives.jsonl +
transcript.json (+ cells/cell_NNN.py for the code agent; no images), rows shaped like a real scripted
episode's (raw usage with its estimate breakdown, tool arguments, primitive
results).  The grid is paired like the paper's (9 episodes per instance: the
tool agent in 5 ablations, code in 4), so `report` runs every table.  The
first trace is checked with `agents.schema.validate_trace`.  Cell texts are all
different by default (`--cells unique`: names and constants vary, as an LLM
writes them), so cell statistics are computed for every cell; `--cells
repeated` uses 3 texts in all, as the scripted planner repeats its cells.
Code traces carry `cells/stats.json` as the trace writer stores it (computed
here while generating, as each episode job computes it);
`--no-stored-stats` leaves it out, so ingest parses every cell itself.

Then, each step in a child process, printing wall time and the peak RSS of
its largest process (the command or one of its parsing workers):
  1. DuckDB's raw scan: `read_json` over every episode.json and every
     calls.jsonl / primitives.jsonl (what any loader pays to open the files);
  2. `cellbench ingest --strict`, cold (an empty database);
  3. `cellbench ingest` again, nothing changed (the incremental path);
  4. `cellbench ingest` after 1% of the episodes were re-run and 1% added;
  5. `cellbench report` on the 10^5-episode database;
  6. the report's tables built in one process twice, with the config's
     bootstrap and with a single resample: what the intervals add.
Goal: ingest + report <= 60 s, memory bounded; the bootstrap a few seconds at most.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from analysis.cellstats import STORED_STATS_FILE, stored_stats  # noqa: E402
BIN = Path(sys.executable).parent
SUITES = [f"libero_{b}_{p}" for b in ("spatial", "object", "goal", "10") for p in ("swap", "lan", "object", "task")]
TOOL_ABLATIONS = ("full", "no_vla", "no_guides", "no_vla_no_guides", "images_on_demand")
CODE_ABLATIONS = ("full", "no_vla", "no_guides", "no_vla_no_guides")
CELL = '''\
candidates = [{candidates}]
seen = {{}}
for name in candidates:
    r = robo.locate(name)
    if r.found:
        seen[name] = r
target = robo.locate('{target}')
print({{k: [round(v, 3) for v in r.position] for k, r in seen.items()}}, target.position)
def place(name, tries={tries}):
    for attempt in range(tries):
        g = robo.grasp(name)
        if g.ok and robo.state().holding:
            p = robo.place_on('{target}', dz={dz})
            if p.ok:
                return True
        robo.open_gripper()
    return False
ok = place(min(seen, key=lambda n: seen[n].position[0]))
if not ok:
    robo.show('agentview')
print('placed', ok)
'''


OBJECTS = ("akita_black_bowl_1", "akita_black_bowl_2", "plate_1", "cookie_box_1", "glazed_rim_porcelain_ramekin_1",
           "wooden_cabinet_1", "flat_stove_1", "alphabet_soup_1", "cream_cheese_1", "ketchup_1", "tomato_sauce_1",
           "butter_1", "milk_1", "chocolate_pudding_1", "orange_juice_1", "bbq_sauce_1", "salad_dressing_1")
#: "unique": every cell's text differs (names, constants), as an LLM writes them, so nothing is
#: served from cellstats' per-text cache; "repeated": 3 texts in all, as the scripted planner repeats.
CELLS_MODE = "unique"
#: Write cells/stats.json as the trace writer does (False: traces without it, ingest parses every cell).
STORE_STATS = True


# --------------------------------------------------------------- generation
def _cell(rng: random.Random, i: int) -> str:
    if CELLS_MODE == "repeated":
        return CELL.format(candidates="'akita_black_bowl_1', 'akita_black_bowl_2'", target="plate_1", tries=1 + i,
                           dz=0.02)
    picked = rng.sample(OBJECTS, 4)
    return CELL.format(candidates=", ".join(repr(o) for o in picked[:3]), target=picked[3], tries=1 + i,
                       dz=round(rng.uniform(0.005, 0.05), 4))


def _call_row(i: int, rng: random.Random, kind: str, success_after: bool) -> dict:
    prompt = 1500 + 900 * i + rng.randrange(200)
    cached = 1024 * (i - 1)
    row = {
        "call_index": i, "started_at": 1.7e9 + i, "latency_s": round(rng.uniform(0.5, 4), 3),
        "input_tokens": prompt, "cached_input_tokens": cached, "cache_write_tokens": 0,
        "output_tokens": 22 if kind == "tool" else 400 + rng.randrange(300), "reasoning_tokens": 0,
        "usage_source": "estimated",
        "raw_usage": {"prompt_tokens": prompt, "completion_tokens": 22, "total_tokens": prompt + 22,
                      "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0,
                                                "image_tokens": 255 * i, "text_tokens": prompt - 255 * i},
                      "completion_tokens_details": {"reasoning_tokens": 0},
                      "estimate": {"encoding": "o200k_base", "message_text_tokens": 202 + 100 * i,
                                   "tool_schema_tokens": 1081, "framing_tokens": 15, "image_tokens": 255 * i,
                                   "n_images": i, "shared_prefix_tokens": cached}},
        "images_in_prompt": i, "images_returned": 3 if kind == "tool" else 0, "action_kind": kind,
        "tool_name": "move_to" if kind == "tool" else "python",
        "tool_args": {"xyz": [round(rng.uniform(-0.3, 0.3), 4), 0.21, 0.95]} if kind == "tool" else None,
        "cell_hash": None, "n_primitives": 1 if kind == "tool" else 3, "n_acting": 1, "exception": None,
        "success_after": success_after, "retries": 0, "error": None, "retry_errors": None, "tool_calls_in_reply": 1,
        "tool_call_source": "native", "images_withheld": 0,
        "input_sources": _input_sources(i, prompt, kind), "left_api": None,
    }
    return row


def _input_sources(i: int, prompt: int, kind: str) -> dict:
    """A breakdown shaped like agents.usage.input_sources': the parts sum to the prompt."""
    fixed = {"system": 120, "tools_api": 1081, "guide": 0 if kind == "tool" else 300, "task": 60,
             "images": 255 * i, "history_assistant": 40 * (i - 1)}
    newest = 0 if i == 1 else 80
    rest = max(0, prompt - sum(fixed.values()) - newest)
    return {**fixed, "n_images": i, "history_results": rest, "newest_observation": newest,
            "total": sum(fixed.values()) + newest + rest}


def _primitive_row(call_index: int, seq: int, rng: random.Random, name: str) -> dict:
    return {"call_index": call_index, "seq": seq, "name": name, "args": {"name": "akita_black_bowl_1"},
            "acting": name != "locate", "ok": True,
            "result": {"name": "akita_black_bowl_1", "found": True,
                       "position": [round(rng.uniform(-0.2, 0.2), 4), 0.2086, 0.9292],
                       "extent": [0.1019, 0.0925, 0.0429], "top_z": 0.9507, "score": 1.0, "n_points": 1126},
            "sim_steps": 0 if name == "locate" else 180, "wall_s": round(rng.uniform(0.05, 2), 3)}


def _episode(d: Path, benchmark: str, suite: str, index: int, seed: int, agent: str, ablation: str) -> None:
    key = f"{suite}/{index}/{seed}/{agent}/{ablation}"
    rng = random.Random(hashlib.sha256(key.encode()).digest())
    n_calls = rng.randint(3, 9) if agent == "tool" else rng.randint(1, 3)
    success = rng.random() < (0.55 if agent == "tool" else 0.7)
    kind = "tool" if agent == "tool" else "cell"
    calls, prims, cells = [], [], []
    for i in range(1, n_calls + 1):
        row = _call_row(i, rng, kind, success and i == n_calls)
        if kind == "cell":
            code = _cell(rng, i)
            row["cell_hash"] = hashlib.sha256(code.encode()).hexdigest()
            row["tool_args"] = {"code": code}
            cells.append((i, code))
            names = ["locate", "grasp", "place_on"]
        else:
            names = ["move_to"]
        for name in names:
            prims.append(_primitive_row(i, len(prims), rng, name))
        calls.append(row)
    d.mkdir(parents=True, exist_ok=True)
    (d / "calls.jsonl").write_text("".join(json.dumps(r) + "\n" for r in calls))
    (d / "primitives.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prims))
    if cells:
        (d / "cells").mkdir(exist_ok=True)
        for i, code in cells:
            (d / "cells" / f"cell_{i:03d}.py").write_text(code)
        if STORE_STATS:  # as agents.trace.TraceWriter does when the episode ends
            executed: dict[int, list] = {}
            for p in prims:
                executed.setdefault(p["call_index"], []).append((p["name"], p["acting"]))
            (d / "cells" / STORED_STATS_FILE).write_text(json.dumps(stored_stats(cells, executed)))
    tokens = {k: sum(c[k] for c in calls) for k in ("input_tokens", "cached_input_tokens", "cache_write_tokens",
                                                    "output_tokens", "reasoning_tokens")}
    episode = {
        "benchmark": benchmark, "suite": suite, "task": f"{suite}/{index}", "seed": seed, "agent": agent,
        "ablation": ablation, "planner": "scripted", "model": "scripted-v1",
        "instruction": "pick up the black bowl between the plate and the ramekin and place it on the plate",
        "success": success, "solved_at_call": n_calls if success else None,
        "status": "solved" if success else rng.choice(["call_budget", "gave_up"]), "n_calls": n_calls, **tokens,
        "usage_source": "estimated", "images_in_prompts": sum(c["images_in_prompt"] for c in calls),
        "images_returned": sum(c["images_returned"] for c in calls), "n_primitives": len(prims),
        "n_acting": sum(p["acting"] for p in prims), "sim_steps": sum(p["sim_steps"] for p in prims),
        "wall_time_s": round(rng.uniform(15, 70), 3), "started_at": 1.7e9, "finished_at": 1.7e9 + 60,
        "call_budget": 40, "wall_clock_limit_s": 900.0, "config_hash": "synthetic", "code_version": "synthetic",
        "package_versions": {"duckdb": "2.0.1", "mujoco": "3.3.7", "robosuite": "1.4.0"}, "repeat": 0,
        "error": None, "sandbox": None, "cell_worker_restarts": 0, "n_compactions": 0, "schema_version": 2,
    }
    # Not read by ingest, but a trace has one (and images/, left out here).
    (d / "transcript.json").write_text(json.dumps([{"role": "system", "content": "synthetic"},
                                                   {"role": "user", "content": episode["instruction"]}]))
    (d / "episode.json").write_text(json.dumps(episode, indent=1))


def grid(n_episodes: int) -> list[tuple]:
    """(suite, index, seed, agent, ablation) of about n_episodes episodes, 9 per instance."""
    instances = -(-n_episodes // 9)
    seeds = -(-instances // (len(SUITES) * 10))
    out = []
    for seed in range(seeds):
        for suite in SUITES:
            for index in range(10):
                for agent, ablations in (("tool", TOOL_ABLATIONS), ("code", CODE_ABLATIONS)):
                    out += [(suite, index, seed, agent, a) for a in ablations]
                if len(out) >= n_episodes:
                    return out
    return out


def trace_dir(root: Path, suite: str, index: int, seed: int, agent: str, ablation: str) -> Path:
    return root / "libero_pro" / ablation / agent / suite / str(index) / f"seed{seed}"


def _write_chunk(args: tuple[str, list[tuple]]) -> int:
    root, cells = args
    for suite, index, seed, agent, ablation in cells:
        _episode(trace_dir(Path(root), suite, index, seed, agent, ablation), "libero_pro", suite, index, seed,
                 agent, ablation)
    return len(cells)


def generate(root: Path, episodes: list[tuple], workers: int) -> float:
    t0 = time.perf_counter()
    chunks = [(str(root), episodes[i:i + 2000]) for i in range(0, len(episodes), 2000)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        sum(pool.imap_unordered(_write_chunk, chunks))
    return time.perf_counter() - t0


# ---------------------------------------------------------------- measuring
def measured(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB of its largest process, stderr tail) of a command run in a fresh child."""
    wrapper = ("import resource, subprocess, sys, time, json\n"
               "t = time.perf_counter(); p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
               "print(json.dumps([time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
               " p.returncode, p.stderr[-1500:]]))")
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], cwd=cwd, capture_output=True, text=True, check=True)
    wall, rss_kib, code, err = json.loads(out.stdout.splitlines()[-1])
    if code != 0:
        sys.exit(f"{' '.join(cmd)} failed ({code}):\n{err}")
    return wall, rss_kib / 1024, err


RAW_SCAN = """
import duckdb, sys
root = sys.argv[1]
con = duckdb.connect()
for name in ("episode.json", "calls.jsonl", "primitives.jsonl"):
    fmt = "auto" if name.endswith(".json") else "newline_delimited"
    n, = con.execute(f"SELECT count(*) FROM read_json('{root}/**/{name}', format='{fmt}', union_by_name=true,"
                     " maximum_object_size=1000000)").fetchone()
    print(name, n, file=sys.stderr)
"""


BOOTSTRAP_COST = """
import sys, time
from analysis.bootstrap import Bootstrap
from analysis.cost import choose_price_table, load_config
from analysis.report import build_tables, load_report_data
config = load_config(sys.argv[2])
data = load_report_data(sys.argv[1], choose_price_table(config, None))
# Interleaved, three times each, medians: on a shared machine wall time swings with the load; CPU time
# (this process's, BLAS threads included) is what the intervals themselves cost.
runs = {"with": [], "one": []}
for _ in range(3):
    for label, boot in (("with", Bootstrap.from_config(config)), ("one", Bootstrap(resamples=1))):
        data.bootstrap = boot
        wall, cpu = time.perf_counter(), time.process_time()
        build_tables(data)
        runs[label].append((time.perf_counter() - wall, time.process_time() - cpu, boot.resamples))
for label, rows in runs.items():
    wall, cpu, n = (sorted(x)[1] for x in zip(*rows))
    print(label, n, wall, cpu, file=sys.stderr)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--dir", type=Path, default=None, help="keep (and reuse) the synthetic tree here")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--cells", choices=("unique", "repeated"), default="unique",
                    help="cell texts all different (as an LLM writes them; default) or 3 texts repeated")
    ap.add_argument("--no-stored-stats", action="store_true",
                    help="traces without cells/stats.json (older traces): ingest parses every cell")
    ap.add_argument("--no-raw-scan", action="store_true", help="skip DuckDB's raw scan (minutes at 10^5)")
    args = ap.parse_args()
    global CELLS_MODE, STORE_STATS
    CELLS_MODE = args.cells  # before the generating workers fork
    STORE_STATS = not args.no_stored_stats

    tmp = None
    if args.dir is None:
        tmp = tempfile.mkdtemp(prefix="cellbench-ingest-scale-")
        base = Path(tmp)
    else:
        base = args.dir
        base.mkdir(parents=True, exist_ok=True)
    try:
        run(base, args)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def run(base: Path, args) -> None:
    results, db, tables = base / "episodes", base / "traces.duckdb", base / "tables"
    episodes = grid(args.episodes)
    marker = base / f".generated-{len(episodes)}-{CELLS_MODE}-{'stored' if STORE_STATS else 'bare'}"
    if not marker.exists():
        shutil.rmtree(results, ignore_errors=True)
        for old in base.glob(".generated-*"):
            old.unlink()
        seconds = generate(results, episodes, args.workers)
        marker.touch()
        print(f"generated {len(episodes):,} episodes in {seconds:.1f} s under {results}")
    from agents.schema import validate_trace

    first = trace_dir(results, *episodes[0])
    assert validate_trace(first) == [], validate_trace(first)
    n_files = sum(len(files) for _, _, files in os.walk(results))
    print(f"{len(episodes):,} episodes, {n_files:,} files, {CELLS_MODE} cell texts, "
          f"{'with' if STORE_STATS else 'without'} cells/stats.json; {args.workers} CPUs")
    db.unlink(missing_ok=True)
    cellbench = str(BIN / "cellbench")

    rows = []
    if not args.no_raw_scan:
        wall, rss, err = measured([sys.executable, "-c", RAW_SCAN, str(results)], ROOT)
        counts = dict(line.split() for line in err.splitlines() if line.split()[0].endswith(("json", "jsonl")))
        rows.append(("DuckDB read_json of every trace file (raw scan)", wall, rss))
        print(f"  raw scan rows: {', '.join(f'{k} {int(v):,}' for k, v in counts.items())}")

    ingest = [cellbench, "ingest", "--strict", "--results", str(results), "--db", str(db)]
    wall, rss, err = measured(ingest, ROOT)
    rows.append(("cellbench ingest, cold", wall, rss))
    wall, rss, err = measured(ingest, ROOT)
    rows.append(("cellbench ingest, nothing changed", wall, rss))

    # 1% re-run (rewritten in place, as a re-run episode is) and 1% new (the next seed).
    rng = random.Random(0)
    for cell in rng.sample(episodes, len(episodes) // 100):
        _episode(trace_dir(results, *cell), "libero_pro", *cell)
    last_seed = max(e[2] for e in episodes)
    new = [(s, i, last_seed + 1, a, ab) for (s, i, _, a, ab) in episodes[: len(episodes) // 100 // 9 * 9]]
    _write_chunk((str(results), new))
    wall, rss, err = measured(ingest, ROOT)
    rows.append((f"cellbench ingest, 1% re-run + 1% new ({len(new):,})", wall, rss))
    summary = [line for line in err.splitlines() if line.startswith("ingest:")]
    wall, rss, _ = measured([cellbench, "report", "--db", str(db), "--out", str(tables),
                             "--config", str(ROOT / "config.yaml")], ROOT)
    rows.append(("cellbench report", wall, rss))
    _, _, err = measured([sys.executable, "-c", BOOTSTRAP_COST, str(db), str(ROOT / "config.yaml")], ROOT)
    boot = {label: (int(n), float(wall), float(cpu)) for label, n, wall, cpu in
            (line.split() for line in err.splitlines() if line.startswith(("with ", "one ")))}
    # Leave the tree as generated for a rerun with --dir.
    for cell in new:
        shutil.rmtree(trace_dir(results, *cell), ignore_errors=True)

    print(f"  {summary[-1] if summary else ''}")
    print(f"{'step':<52} {'wall s':>8} {'peak RSS MiB':>13}")
    for name, wall, rss in rows:
        print(f"{name:<52} {wall:8.1f} {rss:13.0f}")
    cold = next(w for n, w, _ in rows if n.endswith("cold"))
    warm = next(w for n, w, _ in rows if "re-run" in n)
    report = rows[-1][1]
    print(f"ingest + report: cold {cold + report:.1f} s, incremental (1% re-run + 1% new) {warm + report:.1f} s "
          f"(goal 60 s); per episode, cold: ingest {1000 * cold / len(episodes):.2f} ms"
          + (f", raw scan {1000 * rows[0][1] / len(episodes):.2f} ms" if not args.no_raw_scan else ""))
    (n_boot, wall_with, cpu_with), (_, wall_one, cpu_one) = boot["with"], boot["one"]
    print(f"tables in one process (median of 3): with the bootstrap ({n_boot:,} resamples) {wall_with:.2f} s wall, "
          f"{cpu_with:.2f} s CPU; with one resample {wall_one:.2f} s wall, {cpu_one:.2f} s CPU: the intervals add "
          f"{cpu_with - cpu_one:.2f} s CPU ({wall_with - wall_one:+.2f} s wall)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {len(os.sched_getaffinity(0))} CPUs")


if __name__ == "__main__":
    main()
