"""The paper's paired statistics (§3.4–3.8, App. E): pure functions from DataFrames of the database to tables.

Inputs are the `paired` frame (one row per instance and comparison, with
``tool_*`` and ``code_*`` columns; see analysis.schema) enriched by
analysis.report with per-episode costs under the chosen price table, and
per-call / per-cell frames.  Every table has one row per comparison
(ablation) and benchmark group, plus a pooled group "All".
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pandas as pd
from scipy.stats import binomtest, wilcoxon

from agents.records import ABLATIONS, STATUSES
from analysis.bootstrap import Bootstrap, cluster_ids, divide
from analysis.cellstats import CELL_STATS_FIELDS

AGENTS = ("tool", "code")
POOLED = "All"
#: The ending of an unsuccessful episode that exhausted its LLM-call budget (the paper's §3.8 split).
CALL_BUDGET = "call_budget"
#: Endings of an unsuccessful episode stopped by another limit before its call budget ran out.
OTHER_LIMIT_STATUSES = ("context_overflow", "wall_clock", "dollar_budget")
#: Endings of an unsuccessful episode that stopped before any limit.
EARLY_END_STATUSES = ("gave_up", "error")
#: Infrastructure failures: rerun, never counted, never in a denominator.
PLANNER_ERROR = "planner_error"
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


def exact_conditional_ci(only_tool: int, only_code: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """CI for p_code - p_tool, exact and conditional on the discordant pairs.

    Given d = only_tool + only_code discordant instances, only_code is
    Binomial(d, pi) and delta = (d / n)(2 pi - 1).  The Clopper-Pearson
    interval for pi, mapped through that line, excludes 0 exactly when the
    two-sided exact McNemar test (`mcnemar_exact_p`) rejects at
    1 - confidence: both invert the same binomial at 1/2, which is symmetric.
    It treats d as fixed, so it is narrower than an unconditional interval
    when d is large; NaN without discordant pairs (nothing to estimate).
    """
    discordant = only_tool + only_code
    if n == 0 or discordant == 0:
        return float("nan"), float("nan")
    ci = binomtest(only_code, discordant, 0.5).proportion_ci(confidence_level=confidence, method="exact")
    share = discordant / n
    return share * (2 * ci.low - 1), share * (2 * ci.high - 1)


SUCCESS_COLUMNS = ["comparison", "benchmark", "n_instances", "tool_success_pct", "code_success_pct", "delta_pts",
                   "delta_ci_low_pts", "delta_ci_high_pts", "delta_boot_low_pts", "delta_boot_high_pts",
                   "both", "only_tool", "only_code", "neither", "mcnemar_p"]


def _label(*parts) -> str:
    """A table row's name: keys its bootstrap generator."""
    return "|".join(str(p) for p in parts)


def success_table(paired: pd.DataFrame, boot: Bootstrap | None = None, key: str = "") -> pd.DataFrame:
    """Paired success per comparison and group: the exact test and interval on the discordant pairs, and
    the cluster bootstrap's interval for delta (tasks resampled, so seeds of a task are not counted as
    independent: it can be wider than the exact one)."""
    boot = boot or Bootstrap()
    records = []
    for comparison, benchmark, rows in benchmark_groups(paired):
        tool, code = rows["tool_success"].astype(bool), rows["code_success"].astype(bool)
        both, only_tool = int((tool & code).sum()), int((tool & ~code).sum())
        only_code, neither = int((~tool & code).sum()), int((~tool & ~code).sum())
        n = len(rows)
        low, high = exact_conditional_ci(only_tool, only_code, n)
        t = boot.totals(cluster_ids(rows), {"tool": tool.to_numpy(), "code": code.to_numpy(), "n": np.ones(n)},
                        _label("success", key, comparison, benchmark))
        boot_low, boot_high = boot.interval(divide(t["code"] - t["tool"], t["n"]))
        records.append(dict(
            comparison=comparison, benchmark=benchmark, n_instances=n,
            tool_success_pct=100 * tool.mean(), code_success_pct=100 * code.mean(),
            delta_pts=100 * (code.mean() - tool.mean()), delta_ci_low_pts=100 * low, delta_ci_high_pts=100 * high,
            delta_boot_low_pts=100 * boot_low, delta_boot_high_pts=100 * boot_high,
            both=both, only_tool=only_tool, only_code=only_code, neither=neither,
            mcnemar_p=mcnemar_exact_p(only_tool, only_code)))
    return _table(records, SUCCESS_COLUMNS)


# ---------------------------------------------------------------------------
# Jointly solved instances: calls, tokens, dollars


def jointly_solved(paired: pd.DataFrame) -> pd.DataFrame:
    return paired[paired["tool_success"].astype(bool) & paired["code_success"].astype(bool)]


#: Whole-episode measures of the jointly solved table: name -> per-agent column of the paired frame.
JOINT_MEASURES = {"llm_calls": "n_calls", "input_tokens": "input_tokens", "dollars": "dollars"}
JOINT_COLUMNS = (["comparison", "benchmark", "n_jointly_solved"]
                 + [c for m in JOINT_MEASURES for c in (f"tool_{m}", f"code_{m}", f"tool_{m}_median",
                                                        f"code_{m}_median", f"{m}_ratio", f"{m}_ratio_ci_low",
                                                        f"{m}_ratio_ci_high")]
                 + ["tokens_per_call_ratio", "tokens_per_call_ratio_ci_low", "tokens_per_call_ratio_ci_high",
                    "input_tokens_wilcoxon_p"])


def joint_resamples(rows: pd.DataFrame, boot: Bootstrap, label: str) -> dict[str, np.ndarray]:
    """Resampled statistics of jointly solved `rows`: per-agent means of each JOINT_MEASURES measure
    (`{agent}_{measure}`), their ratios of totals (`{measure}_ratio`) and `tokens_per_call_ratio`."""
    columns = {f"{a}_{m}": rows[f"{a}_{c}"].to_numpy(dtype=float) for m, c in JOINT_MEASURES.items() for a in AGENTS}
    t = boot.totals(cluster_ids(rows), {**columns, "n": np.ones(len(rows))}, label)
    out = {name: divide(t[name], t["n"]) for name in columns}
    for m in JOINT_MEASURES:
        out[f"{m}_ratio"] = divide(t[f"tool_{m}"], t[f"code_{m}"])
    out["tokens_per_call_ratio"] = divide(divide(t["tool_input_tokens"], t["tool_llm_calls"]),
                                          divide(t["code_input_tokens"], t["code_llm_calls"]))
    return out


def wilcoxon_p(tool: np.ndarray, code: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p on paired values (H2: input tokens); 1 when every pair is equal."""
    diff = np.asarray(tool, dtype=float) - np.asarray(code, dtype=float)
    if diff.size == 0:
        return float("nan")
    if not np.any(diff):
        return 1.0
    return float(wilcoxon(tool, code, alternative="two-sided").pvalue)


def jointly_solved_table(paired: pd.DataFrame, boot: Bootstrap | None = None, key: str = "") -> pd.DataFrame:
    """Whole-episode means and medians per agent on jointly solved instances; ratios of totals (tool / code)
    with bootstrap intervals; the Wilcoxon signed-rank test of H2 on per-instance input tokens."""
    boot = boot or Bootstrap()
    records = []
    for comparison, benchmark, rows in benchmark_groups(jointly_solved(paired)):
        rec = dict(comparison=comparison, benchmark=benchmark, n_jointly_solved=len(rows))
        resampled = joint_resamples(rows, boot, _label("joint", key, comparison, benchmark))
        for measure, column in JOINT_MEASURES.items():
            for agent in AGENTS:
                rec[f"{agent}_{measure}"] = rows[f"{agent}_{column}"].mean()
                rec[f"{agent}_{measure}_median"] = rows[f"{agent}_{column}"].median()
            rec[f"{measure}_ratio"] = _ratio(rows[f"tool_{column}"].sum(), rows[f"code_{column}"].sum())
            rec[f"{measure}_ratio_ci_low"], rec[f"{measure}_ratio_ci_high"] = boot.interval(resampled[f"{measure}_ratio"])
        calls = {a: rows[f"{a}_n_calls"].sum() for a in AGENTS}
        tokens = {a: rows[f"{a}_input_tokens"].sum() for a in AGENTS}
        rec["tokens_per_call_ratio"] = _ratio(_ratio(tokens["tool"], calls["tool"]), _ratio(tokens["code"], calls["code"]))
        rec["tokens_per_call_ratio_ci_low"], rec["tokens_per_call_ratio_ci_high"] = boot.interval(
            resampled["tokens_per_call_ratio"])
        rec["input_tokens_wilcoxon_p"] = wilcoxon_p(rows["tool_input_tokens"], rows["code_input_tokens"])
        records.append(rec)
    return _table(records, JOINT_COLUMNS)


DECOMPOSITION_COLUMNS = ["comparison", "benchmark", "n_jointly_solved",
                         "llm_calls_ratio", "llm_calls_ratio_ci_low", "llm_calls_ratio_ci_high",
                         "tokens_per_call_ratio", "tokens_per_call_ratio_ci_low", "tokens_per_call_ratio_ci_high",
                         "input_tokens_ratio", "input_tokens_ratio_ci_low", "input_tokens_ratio_ci_high"]


def token_decomposition(paired: pd.DataFrame, boot: Bootstrap | None = None,
                        joint: pd.DataFrame | None = None) -> pd.DataFrame:
    """Fig. 5: token ratio = LLM-call ratio x tokens-per-call ratio (tool / code, jointly solved), with the
    jointly solved table's intervals (the same resamples: one label, one generator); `joint`: that table,
    when already built from the same `paired` and `boot`."""
    joint = jointly_solved_table(paired, boot) if joint is None else joint
    return joint[DECOMPOSITION_COLUMNS].reset_index(drop=True) if len(joint) else _table([], DECOMPOSITION_COLUMNS)


def mean_intervals(rows: pd.DataFrame, columns: list[str], boot: Bootstrap, label: str) -> dict[str, tuple[float, float]]:
    """Bootstrap interval of the mean of each column over `rows` (instances; tasks resampled as clusters)."""
    t = boot.totals(cluster_ids(rows), {**{c: rows[c].to_numpy(dtype=float) for c in columns},
                                        "n": np.ones(len(rows))}, label)
    return {c: boot.interval(divide(t[c], t["n"])) for c in columns}


# ---------------------------------------------------------------------------
# Repeats: run-to-run variance (only with repeats > 1)

INSTANCE_OF_REPEAT = ["benchmark", "suite", "task", "seed"]
REPEAT_VARIABILITY_COLUMNS = ["comparison", "benchmark", "agent", "n_instances", "n_repeats", "outcome_varies_pct",
                              "success_pct_mean", "success_pct_sd", "success_pct_min", "success_pct_max"]


def repeat_count(paired: pd.DataFrame) -> int:
    return int(paired["repeat"].nunique()) if len(paired) else 0


def repeat_variability_table(paired: pd.DataFrame) -> pd.DataFrame:
    """Per comparison, group and agent: the share of instances (benchmark, task, seed) run more than once
    whose success differs between repeats, and the success rate's spread over the repeats (each repeat's
    rate over its instances; sd with ddof 1).  Empty with one repeat."""
    if repeat_count(paired) < 2:
        return _table([], REPEAT_VARIABILITY_COLUMNS)
    records = []
    for comparison, benchmark, rows in benchmark_groups(paired):
        for agent in AGENTS:
            success = rows[f"{agent}_success"].astype(int)
            per_instance = success.groupby([rows[c] for c in INSTANCE_OF_REPEAT]).agg(["min", "max", "size"])
            repeated = per_instance[per_instance["size"] >= 2]
            per_repeat = 100 * success.groupby(rows["repeat"]).mean()
            records.append(dict(
                comparison=comparison, benchmark=benchmark, agent=agent, n_instances=len(repeated),
                n_repeats=int(rows["repeat"].nunique()),
                outcome_varies_pct=100 * (repeated["min"] != repeated["max"]).mean() if len(repeated) else float("nan"),
                success_pct_mean=per_repeat.mean(), success_pct_sd=per_repeat.std(ddof=1),
                success_pct_min=per_repeat.min(), success_pct_max=per_repeat.max()))
    return _table(records, REPEAT_VARIABILITY_COLUMNS)


BY_REPEAT_JOINT = ["n_jointly_solved", "input_tokens_ratio", "input_tokens_ratio_ci_low", "input_tokens_ratio_ci_high"]


def by_repeat_table(paired: pd.DataFrame, boot: Bootstrap | None = None) -> pd.DataFrame:
    """The success test (exact McNemar, exact and bootstrap intervals) and the jointly solved input-token
    ratio with its interval, for each repeat alone and pooled over repeats.  Empty with one repeat."""
    columns = ["repeat"] + SUCCESS_COLUMNS + BY_REPEAT_JOINT
    if repeat_count(paired) < 2:
        return _table([], columns)
    parts = []
    subsets = [(str(r), paired[paired["repeat"] == r]) for r in sorted(paired["repeat"].unique())]
    for name, rows in subsets + [("pooled", paired)]:
        key = f"repeat {name}"
        success = success_table(rows, boot, key=key)
        joint = jointly_solved_table(rows, boot, key=key)[["comparison", "benchmark"] + BY_REPEAT_JOINT]
        parts.append(success.merge(joint, on=["comparison", "benchmark"], how="left").assign(repeat=name))
    return pd.concat(parts, ignore_index=True)[columns]


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
    """Share of episodes per ending, per ablation x benchmark group x agent.

    Planner errors are infrastructure failures, out of every rate: each row's
    shares are of its other episodes (n_episodes), and n_planner_errors says
    how many were left out.
    """
    frame = episodes.assign(ending=[ending(s, bool(v)) for s, v in zip(episodes["status"], episodes["success"])])
    found = set(frame["ending"]) if len(frame) else set()
    # Unknown endings are shown, never dropped.
    endings = [e for e in STATUSES if e != PLANNER_ERROR] + sorted(found - set(STATUSES))
    records = []
    for ablation, benchmark, rows in benchmark_groups(frame, by="ablation"):
        for agent in AGENTS:
            everything = rows[rows["agent"] == agent]
            if everything.empty:
                continue
            mine = everything[everything["ending"] != PLANNER_ERROR]
            rec = dict(ablation=ablation, benchmark=benchmark, agent=agent, n_episodes=len(mine),
                       n_planner_errors=len(everything) - len(mine),
                       limit_reached_but_solved=int(((mine["ending"] == "solved") & (mine["status"] != "solved")).sum()),
                       n_compactions=int(mine["n_compactions"].sum()) if "n_compactions" in mine else 0)
            counts = mine["ending"].value_counts()
            rec.update({f"{e}_pct": 100 * counts.get(e, 0) / len(mine) if len(mine) else float("nan")
                        for e in endings})
            records.append(rec)
    return _table(records, ["ablation", "benchmark", "agent", "n_episodes", "n_planner_errors"]
                  + [f"{e}_pct" for e in endings] + ["limit_reached_but_solved", "n_compactions"])


ONLY_ONE_COLUMNS = ["comparison", "benchmark",
                    "only_code", "tool_lost_on_call_budget", "tool_lost_on_other_limit", "tool_ended_before_budget",
                    "tool_other_ending",
                    "only_tool", "code_lost_on_call_budget", "code_lost_on_other_limit", "code_ended_before_budget",
                    "code_other_ending"]


def _only_one_masks(rows: pd.DataFrame):
    """(winner, loser, mask of the instances only the winner solved), code first as in the paper."""
    tool, code = rows["tool_success"].astype(bool), rows["code_success"].astype(bool)
    return (("code", "tool", code & ~tool), ("tool", "code", tool & ~code))


def only_one_solved_table(paired: pd.DataFrame) -> pd.DataFrame:
    """Of instances only one agent solved, how the other ended (§3.8): it exhausted its LLM-call budget,
    another limit stopped it first (context window, wall clock), or it stopped before any limit."""
    records = []
    for comparison, benchmark, rows in benchmark_groups(paired):
        rec = dict(comparison=comparison, benchmark=benchmark)
        for winner, loser, mask in _only_one_masks(rows):
            status = rows.loc[mask, f"{loser}_status"]
            counts = {"lost_on_call_budget": int((status == CALL_BUDGET).sum()),
                      "lost_on_other_limit": int(status.isin(OTHER_LIMIT_STATUSES).sum()),
                      "ended_before_budget": int(status.isin(EARLY_END_STATUSES).sum())}
            rec[f"only_{winner}"] = int(mask.sum())
            rec.update({f"{loser}_{k}": v for k, v in counts.items()})
            rec[f"{loser}_other_ending"] = int(mask.sum()) - sum(counts.values())
        records.append(rec)
    return _table(records, ONLY_ONE_COLUMNS)


ONLY_ONE_INSTANCE_COLUMNS = ["comparison", "benchmark", "suite", "task", "seed", "repeat", "solved_by",
                             "tool_status", "tool_n_calls", "tool_solved_at_call",
                             "code_status", "code_n_calls", "code_solved_at_call"]


def only_one_solved_instances(paired: pd.DataFrame) -> pd.DataFrame:
    """Which instances only one agent solved, with both agents' endings (one row per instance and comparison)."""
    parts = []
    for comparison in comparison_order(paired["comparison"].unique()) if len(paired) else []:
        rows = paired[paired["comparison"] == comparison]
        for winner, _, mask in _only_one_masks(rows):
            parts.append(rows[mask].assign(solved_by=winner))
    if not parts:
        return _table([], ONLY_ONE_INSTANCE_COLUMNS)
    out = pd.concat(parts)[ONLY_ONE_INSTANCE_COLUMNS]
    for column in ("tool_n_calls", "tool_solved_at_call", "code_n_calls", "code_solved_at_call"):
        out[column] = out[column].astype("Int64")  # whole calls, blank where never solved
    order = {c: k for k, c in enumerate(comparison_order(out["comparison"].unique()))}
    return (out.assign(_order=out["comparison"].map(order))
            .sort_values(["_order", "benchmark", "solved_by", "suite", "task", "seed", "repeat"])
            .drop(columns="_order").reset_index(drop=True))


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
