"""A small sample per benchmark group: success, mean LLM calls and episode wall time per agent.

    .venv/bin/python benchmarks/group_sample.py                       # kitchen groups, 3 tasks x 2 seeds
    .venv/bin/python benchmarks/group_sample.py --groups libero_pro kitchen_atomic --seeds 0
    .venv/bin/python benchmarks/group_sample.py --table-only          # reprint from the traces on disk

Each episode is a real `run_episode` with the scripted planner (one at a time:
the simulator is CPU-bound) and writes a normal trace under --out; an episode
whose episode.json already exists is not run again, so an interrupted sample
resumes.  The table is read back from the traces.  The default tasks mix what
the scripted planner covers with what it leaves to the VLA (an articulation
task per kitchen group), so the sample shows honest failures too.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

#: Three tasks per group (see `cellbench tasks` for families and coverage).
SAMPLES = {
    "libero_pro": ["libero_spatial_swap/0", "libero_object_lan/0", "libero_goal_swap/2"],
    "bimanual": ["TwoArmLift/0", "TwoArmLift/13", "TwoArmHandover/0"],
    "kitchen_atomic": ["libero_90/9",    # put the black bowl on the plate (pick_place)
                       "libero_90/52",   # pick up the milk and put it in the basket (pick_place)
                       "libero_90/20"],  # turn on the stove (turn_on: not scripted)
    "kitchen_composite": ["libero_10/0",   # put both the alphabet soup and the tomato sauce in the basket
                          "libero_10/1",   # put both the cream cheese box and the butter in the basket
                          "libero_90/21"],  # turn on the stove and put the frying pan on it (not scripted)
}
BUDGETS = {"kitchen_composite": 100}


def run_sample(groups, seeds, agents, ablation, out: Path) -> None:
    from agents.episode import EpisodeSpec, run_episode
    from agents.planners.scripted import ScriptedPlanner

    for group in groups:
        for task in SAMPLES[group]:
            for seed in seeds:
                for agent in agents:
                    d = out / group / ablation / agent / task.replace("/", "_") / f"seed{seed}"
                    if (d / "episode.json").exists():
                        continue
                    spec = EpisodeSpec(benchmark=group, task=task, seed=seed, agent=agent, ablation=ablation,
                                       call_budget=BUDGETS.get(group, 40), wall_clock_s=900)
                    t = time.monotonic()
                    rec = run_episode(spec, ScriptedPlanner(), str(d))
                    print(f"{group:<17} {task:<22} seed={seed} {agent:<4} {rec.status:<11} success={rec.success} "
                          f"calls={rec.n_calls} wall={time.monotonic() - t:.0f}s", flush=True)


def table(out: Path, ablation: str) -> str:
    rows: dict[tuple[str, str], list[dict]] = {}
    for f in sorted(out.glob(f"*/{ablation}/*/*/*/episode.json")):
        ep = json.loads(f.read_text())
        rows.setdefault((ep["benchmark"], ep["agent"]), []).append(ep)
    lines = [f"| group | agent | episodes | success | mean LLM calls | mean calls (solved) | mean wall s | max wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for (group, agent), eps in sorted(rows.items()):
        solved = [e for e in eps if e["success"]]
        calls_solved = f"{statistics.mean(e['n_calls'] for e in solved):.1f}" if solved else "-"
        lines.append(f"| {group} | {agent} | {len(eps)} | {len(solved)}/{len(eps)} | "
                     f"{statistics.mean(e['n_calls'] for e in eps):.1f} | {calls_solved} | "
                     f"{statistics.mean(e['wall_time_s'] for e in eps):.0f} | {max(e['wall_time_s'] for e in eps):.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", nargs="+", default=["kitchen_atomic", "kitchen_composite"], choices=sorted(SAMPLES))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--agents", nargs="+", default=["tool", "code"], choices=["tool", "code"])
    p.add_argument("--ablation", default="full")
    p.add_argument("--out", type=Path, default=Path("results/group_sample"))
    p.add_argument("--table-only", action="store_true", help="print the table from existing traces")
    args = p.parse_args(argv)
    if not args.table_only:
        run_sample(args.groups, args.seeds, args.agents, args.ablation, args.out)
    print(table(args.out, args.ablation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
