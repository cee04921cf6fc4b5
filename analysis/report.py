"""The analysis tables (paper Tables 2, 3, 6, 8, 9, App. E, §3.8) as CSV and Markdown, from the traces database.

`load_report_data` reads the database read-only, refuses to go on while the
`pairing_problems` view names a duplicate or unpartnered episode, prices
every call under the chosen table and adds each episode's cost at its solving
call.  `build_tables` turns that into the tables of analysis.stats;
`write_tables` writes `<name>.csv` (full precision) and `<name>.md` (rounded,
with a header saying what every column is).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from agents.errors import CellbenchError
from analysis import sandbox_layers, schema, stats, token_sources
from analysis.bootstrap import Bootstrap
from analysis.cost import PriceTable, call_dollars

#: At most this many pairing problems are spelled out in the error.
_PROBLEMS_SHOWN = 20


def open_database(db_path: str | Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to an ingested traces database, or a CellbenchError saying what to do."""
    path = Path(db_path)
    if not path.is_file():
        raise CellbenchError(f"database {path} not found; run `cellbench ingest --db {path}` first")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as e:
        raise CellbenchError(f"cannot open database {path}: {e}") from None
    try:
        version = con.execute("SELECT value FROM meta WHERE key = 'analysis_schema'").fetchall()
    except duckdb.Error:
        version = []
    if version != [(str(schema.ANALYSIS_SCHEMA),)]:
        con.close()
        raise CellbenchError(f"database {path} was not written by this version's ingest; "
                             f"run `cellbench ingest --db {path}` again")
    return con


@dataclass
class ReportData:
    """Everything the tables and figures read, priced under one table."""

    paired: pd.DataFrame
    """The `paired` view, dollars re-priced, plus {agent}_{tokens,calls,dollars}_at_solve."""
    episodes: pd.DataFrame
    """Every episode (planner errors included), without package_versions."""
    calls: pd.DataFrame
    """Every call: trace_dir, call_index, tokens, n_acting, n_primitives, images_returned,
    success_after, dollars, cum_input_tokens, cum_dollars."""
    cells: pd.DataFrame
    """The cells table without the code text."""
    planner_errors: pd.DataFrame
    price: PriceTable
    sources: pd.DataFrame | None = None
    """Every call's input tokens by source (analysis.token_sources.load_call_sources)."""
    bootstrap: Bootstrap = Bootstrap()
    """How the tables' and figures' intervals are drawn (config `analysis`)."""


def pairing_problems(con: duckdb.DuckDBPyConnection) -> list[str]:
    frame = con.execute("SELECT * FROM pairing_problems").df()
    return [f"{schema.instance_label(row)} [{row['comparison']}]: {row['problem']}"
            for row in frame.to_dict("records")]


def check_pairing(con: duckdb.DuckDBPyConnection) -> None:
    """Strict pairing: any duplicate or missing partner stops the report, naming the instances."""
    problems = pairing_problems(con)
    if problems:
        shown = "\n  ".join(problems[:_PROBLEMS_SHOWN])
        more = f"\n  ... and {len(problems) - _PROBLEMS_SHOWN} more" if len(problems) > _PROBLEMS_SHOWN else ""
        raise CellbenchError(f"strict pairing failed on {len(problems)} instance(s) "
                             f"(see `cellbench sql \"SELECT * FROM pairing_problems\"`):\n  {shown}{more}")


def _solve_call(episodes: pd.DataFrame) -> pd.Series:
    """The call that solved each episode: solved_at_call, or the last call when success has no call recorded."""
    solve = episodes["solved_at_call"].astype("float")
    solve = solve.where(solve.notna(), episodes["n_calls"].astype(float))
    return solve.where(episodes["success"].astype(bool))


def load_report_data(db_path: str | Path, price: PriceTable, bootstrap: Bootstrap | None = None) -> ReportData:
    con = open_database(db_path)
    try:
        check_pairing(con)
        paired = con.execute("SELECT * FROM paired").df()
        episodes = con.execute("SELECT * EXCLUDE (package_versions) FROM episodes ORDER BY trace_dir").df()
        calls = call_dollars(con, price, ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens",
                                          "n_acting", "n_primitives", "images_returned", "success_after"))
        cells = con.execute("SELECT * EXCLUDE (code) FROM cells ORDER BY trace_dir, call_index").df()
        planner_errors = con.execute("SELECT * FROM planner_errors").df()
        sources = token_sources.load_call_sources(con)
    finally:
        con.close()

    grouped = calls.groupby("trace_dir", sort=False)
    calls["cum_input_tokens"] = grouped["input_tokens"].cumsum()
    calls["cum_dollars"] = grouped["dollars"].cumsum()

    solve = pd.DataFrame({"trace_dir": episodes["trace_dir"], "solve_call": _solve_call(episodes)})
    upto = calls.merge(solve, on="trace_dir")
    upto = upto[upto["call_index"] <= upto["solve_call"]].groupby("trace_dir")[["input_tokens", "dollars"]].sum()
    solve = solve.set_index("trace_dir")
    solved = solve["solve_call"].notna()
    # An episode solved before its first recorded call cost nothing so far.
    at_solve = pd.DataFrame({
        "calls_at_solve": solve["solve_call"],
        "tokens_at_solve": upto["input_tokens"].reindex(solve.index).fillna(0).where(solved),
        "dollars_at_solve": upto["dollars"].reindex(solve.index).fillna(0).where(solved),
    })
    episode_dollars = calls.groupby("trace_dir")["dollars"].sum()
    for agent in stats.AGENTS:
        dirs = paired[f"{agent}_trace_dir"]
        paired[f"{agent}_dollars"] = dirs.map(episode_dollars).fillna(0.0).to_numpy()
        for column in at_solve.columns:
            paired[f"{agent}_{column}"] = dirs.map(at_solve[column]).to_numpy(dtype=float)
    return ReportData(paired=paired, episodes=episodes, calls=calls, cells=cells,
                      planner_errors=planner_errors, price=price, sources=sources,
                      bootstrap=bootstrap or Bootstrap())


# ---------------------------------------------------------------------------
# What the scripted planner cannot show


SCRIPTED_PLANNER = "scripted"
#: Ablations that change nothing but the prompts' size for a planner reading neither guides nor images.
SCRIPTED_INERT = {
    "no_guides": "it reads no operating guide, so no_guides changes only the prompts' token counts, "
                 "not what either agent does",
    "no_vla_no_guides": "it reads no operating guide, so no_vla_no_guides differs from no_vla only in the "
                        "prompts' token counts, not in what either agent does",
    "images_on_demand": "it reads no images, so images on demand change only tool calling's token counts, "
                        "not what it does",
}


def scripted_caveats(episodes: pd.DataFrame) -> dict[str, str]:
    """comparison -> the note its tables and figures carry: ablations the scripted planner ran that it
    cannot react to (it reads neither operating guides nor images)."""
    if episodes.empty:
        return {}
    ran = set(episodes.loc[episodes["planner"] == SCRIPTED_PLANNER, "ablation"])
    return {a: f"Scripted planner: {text}." for a, text in SCRIPTED_INERT.items() if a in ran}


def scripted_header(episodes: pd.DataFrame) -> str | None:
    """The paragraph every table opens with when the scripted planner ran an ablation it cannot react to."""
    inert = [a for a in SCRIPTED_INERT if a in scripted_caveats(episodes)]
    if not inert:
        return None
    return ("**Planner: scripted** (the offline stand-in for an LLM). It reads neither operating guides nor "
            "images, so " + ", ".join(f"`{a}`" for a in inert) + " change only token counts here: read those "
            "rows for what the prompts cost, not for an effect of guides or images on success or LLM calls.")


# ---------------------------------------------------------------------------
# Tables


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    note: str
    frame: pd.DataFrame
    markdown: bool = True


def main_results_table(success: pd.DataFrame, joint: pd.DataFrame) -> pd.DataFrame:
    """Tables 2 and 3 of the paper: success on all instances, costs on the jointly solved."""
    keep = ["comparison", "benchmark", "n_instances", "tool_success_pct", "code_success_pct", "delta_pts",
            "delta_ci_low_pts", "delta_ci_high_pts", "delta_boot_low_pts", "delta_boot_high_pts", "mcnemar_p"]
    costs = [c for c in joint.columns if not c.endswith("_median") and not c.startswith("tokens_per_call")]
    return success[keep].merge(joint[costs], on=["comparison", "benchmark"], how="left")


def build_tables(data: ReportData) -> list[Table]:
    p = data.paired
    boot = data.bootstrap
    intervals = boot.note()
    success = stats.success_table(p, boot)
    joint = stats.jointly_solved_table(p, boot)
    reach, curves = stats.budget_cutoff_tables(p)
    price = data.price
    from analysis.price_library import origin_of

    priced = (f"Dollars under the price table `{price.model}` (from {origin_of(price)}; "
              f"$/M tokens: input {price.input:g}, cached "
              f"{price.cached_input:g}, cache write {price.cache_write:g}, output {price.output:g}"
              + (f"; calls above {price.long_context_threshold:,} input tokens x{price.long_context_input_multiplier:g} "
                 f"input, x{price.long_context_output_multiplier:g} output" if price.long_context_threshold else "")
              + ").")
    return [
        Table("main_results", "Main results (paper Tables 2 and 3)",
              "Success on every paired instance; LLM calls, input tokens and dollars are whole-episode means "
              "on the instances both agents solved. " + intervals + " " + priced,
              main_results_table(success, joint)),
        Table("success", "Success rates, paired (tool calling vs code)",
              "Instances are (benchmark, suite, task, seed, repeat), paired strictly; planner_error "
              "episodes are excluded (see planner_errors). The delta CI is exact and conditional on the "
              "discordant pairs (Clopper-Pearson on only_code of only_code + only_tool): it excludes 0 "
              "exactly when mcnemar_p < 0.05. delta_boot_*: the cluster bootstrap's interval, which counts "
              "a task's seeds as one draw and so can be wider (or, at few discordant pairs, narrower and "
              "disagreeing with the exact test: read mcnemar_p and delta_ci_* for significance). "
              + intervals, success),
        Table("jointly_solved", "Jointly solved instances: calls, tokens, dollars",
              "Means and medians per episode over whole episodes (calls after success included); ratios "
              "are of aggregate totals, tool / code, their intervals over the jointly solved instances. "
              "input_tokens_wilcoxon_p: H2's paired test (Wilcoxon signed-rank, two-sided) on per-instance "
              "input tokens; it treats instances as independent, the bootstrap does not. "
              + intervals + " " + priced, joint),
        Table("decomposition", "Token decomposition (Fig. 5)",
              "On jointly solved instances: input-token ratio = LLM-call ratio x tokens-per-call ratio "
              "(tool / code). " + intervals, stats.token_decomposition(p, boot, joint)),
        Table("budget_first_reach", "Budget cutoff: first reach of tool calling's final success (Fig. 3)",
              "An episode counts as solved at budget B iff it solved and its cumulative cost through the "
              "solving call is <= B; the budget is per episode. " + priced, reach),
        Table("budget_curves", "Budget cutoff curves (Fig. 3)",
              "Success (%) at each budget of a log grid, per measure.", curves, markdown=False),
        Table("cost", "Cost of all attempts (App. E)",
              "Every paired episode, failures included. " + priced, stats.cost_table(p)),
        Table("cell_stats", "What code cells do (Table 6)",
              "Cells of the code agent's paired episodes, definitions in analysis/cellstats.py; "
              "tool_acting_per_call: acting primitives per LLM call of tool calling on the same instances.",
              stats.cell_stats_table(p, data.cells, data.calls)),
        Table("endings", "How episodes end (Table 9)",
              "Every episode, per ablation and agent, planner errors left out of the shares (infrastructure "
              "failures: n_planner_errors counts them beside each row). An episode that hit a limit with its "
              "task done counts as solved (the paper's rule; how many in limit_reached_but_solved).",
              stats.endings_table(data.episodes)),
        Table("only_one_solved", "Instances only one agent solved (§3.8)",
              "The paper's split: the other agent exhausted its LLM-call budget (call_budget), or ended "
              "before exhausting it: stopped by another limit (context_overflow, wall_clock), or gave up or "
              "hit an error. The instances themselves: only_one_solved_instances.",
              stats.only_one_solved_table(p)),
        Table("only_one_solved_instances", "Which instances only one agent solved, with both endings (§3.8)",
              "One row per instance and comparison that exactly one agent solved.",
              stats.only_one_solved_instances(p)),
        Table("repeat_variability", "Run-to-run variance over repeats",
              "Only with repeats > 1 (empty otherwise). Per comparison, group and agent: the share of "
              "instances (benchmark, task, seed) whose success differs between repeats, and the spread of "
              "the success rate over the repeats.", stats.repeat_variability_table(p)),
        Table("by_repeat", "Success test and token ratio per repeat and pooled",
              "Only with repeats > 1 (empty otherwise). The success table's test and intervals and the "
              "jointly solved input-token ratio for each repeat alone, then pooled over repeats (the "
              "bootstrap keeps a task's repeats together). " + intervals, stats.by_repeat_table(p, boot)),
        Table("images_on_demand", "Tool calling with images on demand (Table 8)",
              "Instances where tool calling ran with automatic images (full), with images on demand, and "
              "code ran in full; calls, tokens and dollars are means on the instances all three solved. "
              + priced, stats.images_on_demand_table(p)),
        *token_sources.tables(data, priced),
        Table("sandbox", "How the code agent's cells were confined (README Isolation)",
              "Code-agent episodes per confinement layer of the cell worker, from each episode.json's "
              "sandbox record (tool calling runs no cell worker); a cell that tried to leave the API is "
              "counted in cell_stats (left_api_pct).", sandbox_layers.sandbox_table(data.episodes)),
        Table("planner_errors", "Planner errors (infrastructure failures: rerun, never counted)",
              "These episodes are left out of pairing, of every paired table and of the endings' shares "
              "(endings counts them beside each row, in n_planner_errors).", data.planner_errors),
    ]


COLUMN_DOCS = {
    "comparison": "ablation compared: tool vs code in that ablation (images_on_demand: tool with images on "
                  "demand vs code in full)",
    "ablation": "ablation the episodes ran in",
    "benchmark": "benchmark group; All pools the groups",
    "agent": "tool = tool calling, code = code cells",
    "n_instances": "paired instances",
    "n_episodes": "episodes",
    "success_pct": "success rate (%)",
    "delta_pts": "code - tool success, percentage points",
    "delta_ci_low_pts": "CI of delta, low end (exact, conditional on the discordant pairs; "
                        "excludes 0 exactly when mcnemar_p < 0.05)",
    "delta_ci_high_pts": "CI of delta, high end (exact, conditional on the discordant pairs; blank: none)",
    "delta_boot_low_pts": "CI of delta, low end (paired bootstrap, tasks resampled as clusters)",
    "delta_boot_high_pts": "CI of delta, high end (paired bootstrap, tasks resampled as clusters)",
    "llm_calls_median": "median LLM calls per episode",
    "input_tokens_median": "median input tokens per episode", "dollars_median": "median dollars per episode",
    **{f"{ratio}_ci_{end}": f"bootstrap CI of {ratio}, {end} end"
       for ratio in ("llm_calls_ratio", "input_tokens_ratio", "dollars_ratio", "tokens_per_call_ratio")
       for end in ("low", "high")},
    "input_tokens_wilcoxon_p": "two-sided Wilcoxon signed-rank p, per-instance input tokens tool vs code (H2)",
    "n_repeats": "repeats run",
    "outcome_varies_pct": "instances run more than once whose success differs between repeats (%)",
    "success_pct_mean": "success rate, mean over repeats (%)", "success_pct_sd": "success rate, sd over repeats (points)",
    "success_pct_min": "success rate, lowest repeat (%)", "success_pct_max": "success rate, highest repeat (%)",
    "both": "instances both solved", "only_tool": "instances only tool calling solved",
    "only_code": "instances only code solved", "neither": "instances neither solved",
    "mcnemar_p": "two-sided exact McNemar p (binomial test on the discordant pairs)",
    "n_jointly_solved": "instances both agents solved",
    "llm_calls": "mean LLM calls per episode",
    "input_tokens": "mean input tokens per episode (cached included)",
    "dollars": "mean dollars per episode",
    "llm_calls_ratio": "tool / code, total LLM calls",
    "input_tokens_ratio": "tool / code, total input tokens",
    "dollars_ratio": "tool / code, total dollars",
    "tokens_per_call_ratio": "tool / code, input tokens per LLM call",
    "measure": "budget measure, cumulative per episode: input_tokens, llm_calls or dollars",
    "final_success_pct": "tool calling's success with no cutoff (%)",
    "budget": "smallest per-episode budget reaching tool calling's final success (blank: never reached)",
    "budget_ratio": "tool budget / code budget",
    "dollars_per_call": "mean dollars per LLM call", "dollars_per_episode": "mean dollars per episode",
    "dollars_per_success": "all dollars spent / episodes solved", "dollars_total": "dollars, all episodes",
    "input_tokens_per_episode": "mean input tokens per episode",
    "n_code_episodes": "code episodes", "n_cells": "code cells",
    "acting_per_cell": "acting primitives executed per cell (mean)",
    "two_or_more_acting_pct": "cells executing >= 2 acting primitives (%)",
    "guarded_chain_pct": "cells with a guarded chain (%)", "retry_pct": "cells with a retry loop (%)",
    "own_perception_pct": "cells doing perception of their own (%)",
    "helper_defined_pct": "cells defining a helper function (%)",
    "helper_reused_pct": "cells calling a helper defined in an earlier cell (%)",
    "conditional_image_request_pct": "cells requesting an image conditionally (%)",
    "single_step_pct": "cells executing exactly one acting primitive (%)",
    "requests_image_pct": "cells requesting an image (%)",
    "unparsed_pct": "cells that are not valid Python (%)",
    "left_api_pct": "cells that tried to reach past the primitives (robo internals, gc, ctypes, subprocess, "
                    "socket, files outside work/: from the text or the worker's record) (%)",
    "tool_acting_per_call": "acting primitives per tool-calling LLM call (mean)",
    "limit_reached_but_solved": "episodes stopped by a limit with the task already done (counted solved)",
    "n_planner_errors": "planner_error episodes left out of n_episodes and of every share",
    "lost_on_call_budget": "of those, the other agent exhausted its LLM-call budget (call_budget)",
    "lost_on_other_limit": "of those, another limit stopped the other agent first (context_overflow, wall_clock)",
    "ended_before_budget": "of those, the other agent gave up or hit an error first",
    "other_ending": "of those, the other agent ended otherwise",
    "suite": "benchmark suite", "task": "task (suite/index)", "seed": "seed", "repeat": "repeat (by_repeat: pooled = every repeat together)",
    "solved_by": "the one agent that solved the instance",
    "status": "how the episode ended", "n_calls": "LLM calls", "solved_at_call": "the call after which the "
    "benchmark's check first held (blank: never)",
    "n_all_solved": "instances all three configurations solved",
    "trace_dir": "trace directory", "error": "the error recorded on episode.json",
}
COLUMN_DOCS.update({k: v for k, v in token_sources.COLUMN_DOCS.items() if k not in COLUMN_DOCS})
COLUMN_DOCS.update({k: v for k, v in sandbox_layers.COLUMN_DOCS.items() if k not in COLUMN_DOCS})
_AGENT_PREFIXES = {"tool_full_": "tool calling, automatic images", "tool_on_demand_": "tool calling, images on demand",
                   "code_full_": "code", "tool_": "tool calling", "code_": "code"}


def describe(column: str) -> str | None:
    if column in COLUMN_DOCS:
        return COLUMN_DOCS[column]
    for prefix, who in _AGENT_PREFIXES.items():
        if column.startswith(prefix) and column[len(prefix):] in COLUMN_DOCS:
            return f"{COLUMN_DOCS[column[len(prefix):]]} ({who})"
    if column.endswith("_pct"):
        return f"episodes ending {column[:-4]} (%)"
    return None


def format_value(column: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{value:,}" if "tokens" in column else str(value)
    if isinstance(value, (float, np.floating)):
        if column.endswith(("_pct", "_pts")):
            return f"{value:.1f}"
        if column.endswith("_p"):
            return f"{value:.3g}"
        if column.endswith("_ratio") or "_ratio_ci_" in column:
            return f"{value:.2f}"
        if "tokens" in column and "ratio" not in column:
            return f"{value:,.0f}"
        if "dollars" in column:
            return f"{value:.4g}"
        if column.endswith("budget"):
            return compact_number(value)
        return f"{value:.2f}"
    return str(value)


def compact_number(value: float) -> str:
    """1.92M, 268k, 2.5k, 27, 0.35: budgets mix token counts, calls and dollars in one column."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3g}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}"


def markdown_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_No rows: nothing in the database qualifies._\n"
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
               for c in frame.columns]
    lines = ["| " + " | ".join(frame.columns) + " |",
             "|" + "|".join("---:" if n else ":---" for n in numeric) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(format_value(c, v) for c, v in zip(frame.columns, row)) + " |")
    return "\n".join(lines) + "\n"


def write_tables(tables: list[Table], out_dir: str | Path, header: str | None = None) -> list[Path]:
    """Each table as CSV and (most) as Markdown; `header`, when given, opens every Markdown table."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in tables:
        csv_path = out / f"{table.name}.csv"
        table.frame.to_csv(csv_path, index=False)
        written.append(csv_path)
        if not table.markdown:
            continue
        docs = [f"- `{c}`: {d}" for c in table.frame.columns if (d := describe(c))]
        md = [f"# {table.title}", "", *([f"> {header}", ""] if header else []), table.note, "", "Columns:", *docs,
              "", markdown_table(table.frame)]
        md_path = out / f"{table.name}.md"
        md_path.write_text("\n".join(md))
        written.append(md_path)
    return written


def write_report(db_path: str | Path, out_dir: str | Path, price: PriceTable,
                 bootstrap: Bootstrap | None = None) -> tuple[list[Path], ReportData]:
    """Every table into `out_dir`; returns the files written and the data they came from."""
    data = load_report_data(db_path, price, bootstrap)
    return write_tables(build_tables(data), out_dir, header=scripted_header(data.episodes)), data

