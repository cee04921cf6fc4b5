"""The paper's paired statistics (§3.4–3.8, App. E): pure functions from DataFrames of the database to tables.

Inputs are the `paired` frame (one row per instance and comparison, with
``tool_*`` and ``code_*`` columns; see analysis.schema) enriched by
analysis.report with per-episode costs under the chosen price table, and
per-call / per-cell frames.  Every table has one row per comparison
(ablation) and benchmark group, plus a pooled group "All".
"""
from __future__ import annotations

from math import sqrt
from typing import Iterator

import numpy as np
import pandas as pd
from scipy.stats import binomtest, norm

from agents.records import ABLATIONS, STATUSES
from analysis.cellstats import CELL_STATS_FIELDS

AGENTS = ("tool", "code")
POOLED = "All"
#: Endings of an unsuccessful episode stopped by a limit (the paper's "exhausts its budget").
BUDGET_STATUSES = ("call_budget", "context_overflow", "wall_clock")
#: Endings of an unsuccessful episode that stopped before any limit.
EARLY_END_STATUSES = ("gave_up", "error")
#: Budget-cutoff measures: name -> per-agent column of the cost at the solving call.
BUDGET_MEASURES = {"input_tokens": "tokens_at_solve", "llm_calls": "calls_at_solve", "dollars": "dollars_at_solve"}
BUDGET_GRID_POINTS = 60


# ---------------------------------------------------------------------------
# Grouping


def comparison_order(values) -> list[str]:
    known = [a for a in ABLATIONS if a in set(values)]
    return known + sorted(set(values) - set(known))


def benchmark_groups(frame: pd.DataFrame, by: str = "comparison") -> Iterator[tuple[str, str, pd.DataFrame]]:
    """(comparison, benchmark or "All", rows) for every benchmark of every comparison, then the pool."""
    if frame.empty:
        return
    for comparison in comparison_order(frame[by].unique()):
        rows = frame[frame[by] == comparison]
        for benchmark in sorted(rows["benchmark"].unique()):
            yield comparison, benchmark, rows[rows["benchmark"] == benchmark]
        yield comparison, POOLED, rows


def _table(records: list[dict], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame.from_records(records, columns=columns)


def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator) / float(denominator) if denominator else float("nan")


# ---------------------------------------------------------------------------
# Success


def mcnemar_exact_p(only_tool: int, only_code: int) -> float:
    """Two-sided exact McNemar test: a binomial test of the discordant pairs at 1/2."""
    discordant = only_tool + only_code
    if discordant == 0:
        return 1.0
    return float(binomtest(only_code, discordant, 0.5, alternative="two-sided").pvalue)


def wilson_interval(successes: int, n: int, z: float) -> tuple[float, float]:
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return centre - half, centre + half


def paired_difference_ci(both: int, only_code: int, only_tool: int, neither: int,
                         confidence: float = 0.95) -> tuple[float, float]:
    """CI for p_code - p_tool on paired binary outcomes: Newcombe's hybrid score (1998, method 10).

    Wilson intervals for each agent's success rate, combined with the
    correlation phi of the paired outcomes; no continuity correction.  Better
    coverage than the Wald interval at the rates and sizes of this study.
    """
    n = both + only_code + only_tool + neither
    if n == 0:
        return float("nan"), float("nan")
    z = float(norm.ppf(0.5 + confidence / 2))
    p_code, p_tool = (both + only_code) / n, (both + only_tool) / n
    l_code, u_code = wilson_interval(both + only_code, n, z)
    l_tool, u_tool = wilson_interval(both + only_tool, n, z)
    margins = (both + only_code) * (only_tool + neither) * (both + only_tool) * (only_code + neither)
    phi = (both * neither - only_code * only_tool) / sqrt(margins) if margins else 0.0
    below = sqrt(max(0.0, (p_code - l_code) ** 2 - 2 * phi * (p_code - l_code) * (u_tool - p_tool) + (u_tool - p_tool) ** 2))
    above = sqrt(max(0.0, (u_code - p_code) ** 2 - 2 * phi * (u_code - p_code) * (p_tool - l_tool) + (p_tool - l_tool) ** 2))
    delta = p_code - p_tool
    return delta - below, delta + above


SUCCESS_COLUMNS = ["comparison", "benchmark", "n_instances", "tool_success_pct", "code_success_pct", "delta_pts",
                   "delta_ci_low_pts", "delta_ci_high_pts", "both", "only_tool", "only_code", "neither", "mcnemar_p"]


def success_table(paired: pd.DataFrame) -> pd.DataFrame:
    records = []
    for comparison, benchmark, rows in benchmark_groups(paired):
        tool, code = rows["tool_success"].astype(bool), rows["code_success"].astype(bool)
        both, only_tool = int((tool & code).sum()), int((tool & ~code).sum())
        only_code, neither = int((~tool & code).sum()), int((~tool & ~code).sum())
        n = len(rows)
        low, high = paired_difference_ci(both, only_code, only_tool, neither)
        records.append(dict(
            comparison=comparison, benchmark=benchmark, n_instances=n,
            tool_success_pct=100 * tool.mean(), code_success_pct=100 * code.mean(),
            delta_pts=100 * (code.mean() - tool.mean()), delta_ci_low_pts=100 * low, delta_ci_high_pts=100 * high,
            both=both, only_tool=only_tool, only_code=only_code, neither=neither,
            mcnemar_p=mcnemar_exact_p(only_tool, only_code)))
    return _table(records, SUCCESS_COLUMNS)


# ---------------------------------------------------------------------------
# Jointly solved instances: calls, tokens, dollars


def jointly_solved(paired: pd.DataFrame) -> pd.DataFrame:
    return paired[paired["tool_success"].astype(bool) & paired["code_success"].astype(bool)]


JOINT_COLUMNS = ["comparison", "benchmark", "n_jointly_solved",
                 "tool_llm_calls", "code_llm_calls", "llm_calls_ratio",
                 "tool_input_tokens", "code_input_tokens", "input_tokens_ratio",
                 "tool_dollars", "code_dollars", "dollars_ratio"]


def jointly_solved_table(paired: pd.DataFrame) -> pd.DataFrame:
    """Whole-episode means per agent on jointly solved instances; ratios of totals (tool / code)."""
    records = []
    for comparison, benchmark, rows in benchmark_groups(jointly_solved(paired)):
        rec = dict(comparison=comparison, benchmark=benchmark, n_jointly_solved=len(rows))
        for measure, column in (("llm_calls", "n_calls"), ("input_tokens", "input_tokens"), ("dollars", "dollars")):
            for agent in AGENTS:
                rec[f"{agent}_{measure}"] = rows[f"{agent}_{column}"].mean()
            rec[f"{measure}_ratio"] = _ratio(rows[f"tool_{column}"].sum(), rows[f"code_{column}"].sum())
        records.append(rec)
    return _table(records, JOINT_COLUMNS)


DECOMPOSITION_COLUMNS = ["comparison", "benchmark", "n_jointly_solved", "llm_calls_ratio",
                         "tokens_per_call_ratio", "input_tokens_ratio"]


def token_decomposition(paired: pd.DataFrame) -> pd.DataFrame:
    """Fig. 5: token ratio = LLM-call ratio x tokens-per-call ratio (tool / code, jointly solved)."""
    records = []
    for comparison, benchmark, rows in benchmark_groups(jointly_solved(paired)):
        calls = {a: rows[f"{a}_n_calls"].sum() for a in AGENTS}
        tokens = {a: rows[f"{a}_input_tokens"].sum() for a in AGENTS}
        records.append(dict(
            comparison=comparison, benchmark=benchmark, n_jointly_solved=len(rows),
            llm_calls_ratio=_ratio(calls["tool"], calls["code"]),
            tokens_per_call_ratio=_ratio(_ratio(tokens["tool"], calls["tool"]), _ratio(tokens["code"], calls["code"])),
            input_tokens_ratio=_ratio(tokens["tool"], tokens["code"])))
    return _table(records, DECOMPOSITION_COLUMNS)


# ---------------------------------------------------------------------------
# Budget cutoff (Fig. 3)


def success_at_budget(at_solve: np.ndarray, n: int, budgets: np.ndarray) -> np.ndarray:
    """Success rate if every episode stopped once its cost reached each budget.

    `at_solve`: an episode's cumulative cost through its solving call (NaN if
    it did not solve); it counts as solved at budget B iff at_solve <= B.
    """
    solved = np.sort(at_solve[~np.isnan(at_solve)])
    return np.searchsorted(solved, budgets, side="right") / n if n else np.full(len(budgets), np.nan)


def first_reach_budget(at_solve: np.ndarray, needed: int) -> float:
    """Smallest budget at which `needed` episodes have solved (NaN if never, or nothing is needed)."""
    solved = np.sort(at_solve[~np.isnan(at_solve)])
    if needed <= 0 or needed > len(solved):
        return float("nan")
    return float(solved[needed - 1])


def budget_grid(values: np.ndarray, points: int = BUDGET_GRID_POINTS) -> np.ndarray:
    """A log-spaced grid of budgets covering the positive values (whole decades at the ends)."""
    positive = values[np.isfinite(values) & (values > 0)]
    if positive.size == 0:
        return np.array([])
    low, high = np.floor(np.log10(positive.min())), np.ceil(np.log10(positive.max()))
    if high == low:
        high = low + 1
    return np.logspace(low, high, points)


FIRST_REACH_COLUMNS = ["comparison", "benchmark", "measure", "n_instances", "tool_final_success_pct",
                       "tool_budget", "code_budget", "budget_ratio"]
CURVE_COLUMNS = ["comparison", "benchmark", "measure", "budget", "tool_success_pct", "code_success_pct"]


def budget_cutoff_tables(paired: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(first-reach budgets, success curves on a log grid) for every measure of BUDGET_MEASURES.

    The first-reach budget of an agent is the smallest budget at which its
    cut-off success reaches tool calling's final success; ratio = tool / code.
    """
    reach, curves = [], []
    for comparison, benchmark, rows in benchmark_groups(paired):
        n = len(rows)
        needed = int(rows["tool_success"].astype(bool).sum())
        for measure, column in BUDGET_MEASURES.items():
            at = {a: rows[f"{a}_{column}"].to_numpy(dtype=float) for a in AGENTS}
            budgets = {a: first_reach_budget(at[a], needed) for a in AGENTS}
            reach.append(dict(comparison=comparison, benchmark=benchmark, measure=measure, n_instances=n,
                              tool_final_success_pct=100 * needed / n,
                              tool_budget=budgets["tool"], code_budget=budgets["code"],
                              budget_ratio=_ratio(budgets["tool"], budgets["code"])))
            grid = budget_grid(np.concatenate([at["tool"], at["code"]]))
            rates = {a: success_at_budget(at[a], n, grid) for a in AGENTS}
            curves.extend(dict(comparison=comparison, benchmark=benchmark, measure=measure, budget=b,
                               tool_success_pct=100 * t, code_success_pct=100 * c)
                          for b, t, c in zip(grid, rates["tool"], rates["code"]))
    return _table(reach, FIRST_REACH_COLUMNS), _table(curves, CURVE_COLUMNS)


# ---------------------------------------------------------------------------
# Cost (App. E)


COST_COLUMNS = ["comparison", "benchmark", "n_instances",
                "tool_dollars_per_call", "code_dollars_per_call",
                "tool_dollars_per_episode", "code_dollars_per_episode",
                "tool_dollars_per_success", "code_dollars_per_success",
                "tool_dollars_total", "code_dollars_total", "dollars_ratio",
                "tool_input_tokens_per_episode", "code_input_tokens_per_episode", "input_tokens_ratio"]


def cost_table(paired: pd.DataFrame) -> pd.DataFrame:
    """Cost of all attempts (every paired episode, failures included); ratios tool / code."""
    records = []
    for comparison, benchmark, rows in benchmark_groups(paired):
        rec = dict(comparison=comparison, benchmark=benchmark, n_instances=len(rows))
        for a in AGENTS:
            dollars = rows[f"{a}_dollars"].sum()
            rec[f"{a}_dollars_per_call"] = _ratio(dollars, rows[f"{a}_n_calls"].sum())
            rec[f"{a}_dollars_per_episode"] = dollars / len(rows)
            rec[f"{a}_dollars_per_success"] = _ratio(dollars, rows[f"{a}_success"].astype(bool).sum())
            rec[f"{a}_dollars_total"] = dollars
            rec[f"{a}_input_tokens_per_episode"] = rows[f"{a}_input_tokens"].mean()
        rec["dollars_ratio"] = _ratio(rec["tool_dollars_total"], rec["code_dollars_total"])
        rec["input_tokens_ratio"] = _ratio(rows["tool_input_tokens"].sum(), rows["code_input_tokens"].sum())
        records.append(rec)
    return _table(records, COST_COLUMNS)


# ---------------------------------------------------------------------------
# Cell statistics (Table 6)


_CELL_SHARES = [f for f in CELL_STATS_FIELDS if f not in ("parses", "n_primitives", "n_acting", "acting_sites")]
CELL_COLUMNS = (["comparison", "benchmark", "n_code_episodes", "n_cells", "acting_per_cell", "two_or_more_acting_pct"]
                + [f"{f}_pct" for f in _CELL_SHARES] + ["unparsed_pct", "tool_acting_per_call"])


def cell_stats_table(paired: pd.DataFrame, cells: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Per comparison and benchmark: what the code agent's cells do, against a tool-calling LLM call.

    `cells`: rows of the cells table (trace_dir + CellStats columns);
    `calls`: trace_dir + n_acting of every call.
    """
    records = []
    for comparison, benchmark, rows in benchmark_groups(paired):
        mine = cells[cells["trace_dir"].isin(rows["code_trace_dir"])]
        tool_calls = calls[calls["trace_dir"].isin(rows["tool_trace_dir"])]
        n = len(mine)
        rec = dict(comparison=comparison, benchmark=benchmark, n_code_episodes=len(rows), n_cells=n,
                   acting_per_cell=mine["n_acting"].mean() if n else float("nan"),
                   two_or_more_acting_pct=100 * (mine["n_acting"] >= 2).mean() if n else float("nan"),
                   unparsed_pct=100 * (~mine["parses"].astype(bool)).mean() if n else float("nan"),
                   tool_acting_per_call=tool_calls["n_acting"].mean() if len(tool_calls) else float("nan"))
        for f in _CELL_SHARES:
            rec[f"{f}_pct"] = 100 * mine[f].astype(bool).mean() if n else float("nan")
        records.append(rec)
    return _table(records, CELL_COLUMNS)


# ---------------------------------------------------------------------------
# Endings (Table 9) and the instances only one agent solved (§3.8)


def ending(status: str, success: bool) -> str:
    """How an episode ended: 'solved' when the benchmark says so, whatever limit stopped it.

    The paper counts an episode that hit a limit with its task already done as
    solved; a planner_error stays one (an infrastructure failure, not a result).
    """
    if status == "planner_error":
        return status
    return "solved" if success else status


def endings_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Share of episodes per ending, per ablation x benchmark group x agent (every episode, reruns included)."""
    frame = episodes.assign(ending=[ending(s, bool(v)) for s, v in zip(episodes["status"], episodes["success"])])
    found = set(frame["ending"]) if len(frame) else set()
    endings = list(STATUSES) + sorted(found - set(STATUSES))  # unknown endings are shown, never dropped
    records = []
    for ablation, benchmark, rows in benchmark_groups(frame, by="ablation"):
        for agent in AGENTS:
            mine = rows[rows["agent"] == agent]
            if mine.empty:
                continue
            rec = dict(ablation=ablation, benchmark=benchmark, agent=agent, n_episodes=len(mine),
                       limit_reached_but_solved=int(((mine["ending"] == "solved") & (mine["status"] != "solved")).sum()))
            counts = mine["ending"].value_counts()
            rec.update({f"{e}_pct": 100 * counts.get(e, 0) / len(mine) for e in endings})
            records.append(rec)
    return _table(records, ["ablation", "benchmark", "agent", "n_episodes"]
                  + [f"{e}_pct" for e in endings] + ["limit_reached_but_solved"])


ONLY_ONE_COLUMNS = ["comparison", "benchmark", "only_code", "tool_lost_on_budget", "tool_ended_before_budget",
                    "tool_other_ending", "only_tool", "code_lost_on_budget", "code_ended_before_budget",
                    "code_other_ending"]


def only_one_solved_table(paired: pd.DataFrame) -> pd.DataFrame:
    """Of instances only one agent solved: did the other exhaust a limit or stop before one?"""
    records = []
    for comparison, benchmark, rows in benchmark_groups(paired):
        tool, code = rows["tool_success"].astype(bool), rows["code_success"].astype(bool)
        rec = dict(comparison=comparison, benchmark=benchmark)
        for winner, loser, mask in (("code", "tool", code & ~tool), ("tool", "code", tool & ~code)):
            status = rows.loc[mask, f"{loser}_status"]
            on_budget, before = int(status.isin(BUDGET_STATUSES).sum()), int(status.isin(EARLY_END_STATUSES).sum())
            rec[f"only_{winner}"] = int(mask.sum())
            rec[f"{loser}_lost_on_budget"] = on_budget
            rec[f"{loser}_ended_before_budget"] = before
            rec[f"{loser}_other_ending"] = int(mask.sum()) - on_budget - before
        records.append(rec)
    return _table(records, ONLY_ONE_COLUMNS)


# ---------------------------------------------------------------------------
# Images on demand (Table 8): tool calling with and without automatic images, against code


IMAGES_ON_DEMAND = "images_on_demand"
_CONFIGS = {"tool_full": ("full", "tool"), "tool_on_demand": (IMAGES_ON_DEMAND, "tool"), "code_full": ("full", "code")}
IOD_COLUMNS = (["benchmark", "n_instances"] + [f"{c}_success_pct" for c in _CONFIGS] + ["n_all_solved"]
               + [f"{c}_{m}" for m in ("llm_calls", "input_tokens", "dollars") for c in _CONFIGS])


def images_on_demand_table(paired: pd.DataFrame) -> pd.DataFrame:
    """On instances all three configurations ran: success, and means on those all three solved."""
    instance = ["benchmark", "suite", "task", "seed", "repeat"]
    full = paired[paired["comparison"] == "full"]
    on_demand = paired[paired["comparison"] == IMAGES_ON_DEMAND]
    if full.empty or on_demand.empty:
        return _table([], IOD_COLUMNS)
    per_config = {}
    for name, (comparison, agent) in _CONFIGS.items():
        source = full if comparison == "full" else on_demand
        cols = {f"{agent}_{c}": f"{name}_{c}" for c in ("success", "n_calls", "input_tokens", "dollars")}
        per_config[name] = source[instance + list(cols)].rename(columns=cols)
    merged = per_config["tool_full"].merge(per_config["tool_on_demand"], on=instance).merge(per_config["code_full"], on=instance)
    merged["comparison"] = IMAGES_ON_DEMAND
    records = []
    for _, benchmark, rows in benchmark_groups(merged):
        all_solved = rows[np.logical_and.reduce([rows[f"{c}_success"].astype(bool) for c in _CONFIGS])]
        rec = dict(benchmark=benchmark, n_instances=len(rows), n_all_solved=len(all_solved))
        for c in _CONFIGS:
            rec[f"{c}_success_pct"] = 100 * rows[f"{c}_success"].astype(bool).mean()
            rec[f"{c}_llm_calls"] = all_solved[f"{c}_n_calls"].mean()
            rec[f"{c}_input_tokens"] = all_solved[f"{c}_input_tokens"].mean()
            rec[f"{c}_dollars"] = all_solved[f"{c}_dollars"].mean()
        records.append(rec)
    return _table(records, IOD_COLUMNS)
