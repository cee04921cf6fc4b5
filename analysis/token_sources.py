"""Where the input tokens go: per-call token sources (CallRecord.input_sources) as tables, and the cached share.

`load_call_sources` reads the breakdown of every call that has one (traces of
schema v1 have none and are left out of these tables only).  `shares_table`
gives, per agent x ablation x benchmark, each source's share of the input
tokens and the tokens per call beside the calls' own `input_tokens` (the
provider's count, or the estimate), so the two totals can be reconciled.
`cached_share_table` says how much of each agent's input was served from the
prefix cache, which is why dollars fall less than tokens when one agent
re-sends a long, cacheable history.
"""
from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from agents.records import INPUT_SOURCES
from analysis import schema, stats

#: How tables and figures name each source.
SOURCE_LABELS = {
    "system": "System prompt",
    "tools_api": "Tool schemas / API reference",
    "guide": "Operating guide",
    "task": "Task card",
    "images": "Images",
    "history_assistant": "Earlier assistant turns",
    "history_results": "Earlier results / cell outputs",
    "newest_observation": "Newest observation",
}
GROUP = ["agent", "ablation", "benchmark"]


def load_call_sources(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """trace_dir, call_index, one column per source, n_images, total: every call with a breakdown."""
    columns = ", ".join(f"s.{name}" for name in (*INPUT_SOURCES, "n_images", "total"))
    return con.execute(
        f"SELECT trace_dir, call_index, {columns} FROM (SELECT trace_dir, call_index, input_sources AS s FROM calls "
        "WHERE input_sources IS NOT NULL) ORDER BY trace_dir, call_index").df()


def _calls_with_episode(sources: pd.DataFrame, calls: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Sources joined with the call's own token counts and its episode's agent, ablation, benchmark
    (planner_error episodes left out, as everywhere in the paired analysis)."""
    counted = episodes[episodes["status"] != schema.PLANNER_ERROR][["trace_dir", *GROUP]]
    own = calls[["trace_dir", "call_index", "input_tokens", "cached_input_tokens", "cache_write_tokens", "dollars"]]
    return sources.merge(own, on=["trace_dir", "call_index"]).merge(counted, on="trace_dir")


def _with_pooled(frame: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """Groups per agent x ablation x benchmark, then per agent x ablation over all benchmarks."""
    groups = [(key, rows) for key, rows in frame.groupby(GROUP, sort=True)]
    if frame["benchmark"].nunique() > 1:
        groups += [((a, b, stats.POOLED), rows) for (a, b), rows in frame.groupby(["agent", "ablation"], sort=True)]
    return groups


def shares_table(sources: pd.DataFrame, calls: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Per agent x ablation x benchmark: each source's share of the input tokens (sum of the source over
    sum of the counted totals, so long calls weigh more), tokens per call counted and as recorded."""
    frame = _calls_with_episode(sources, calls, episodes)
    records = []
    for (agent, ablation, benchmark), rows in _with_pooled(frame):
        total = rows["total"].sum()
        rec = dict(agent=agent, ablation=ablation, benchmark=benchmark, n_episodes=rows["trace_dir"].nunique(),
                   n_calls=len(rows), counted_tokens_per_call=rows["total"].mean(),
                   input_tokens_per_call=rows["input_tokens"].mean(), images_per_call=rows["n_images"].mean())
        for name in INPUT_SOURCES:
            rec[f"{name}_pct"] = 100 * rows[name].sum() / total if total else np.nan
        records.append(rec)
    columns = [*GROUP, "n_episodes", "n_calls", "counted_tokens_per_call", "input_tokens_per_call",
               "images_per_call", *(f"{name}_pct" for name in INPUT_SOURCES)]
    return pd.DataFrame.from_records(records, columns=columns)


def cached_share_table(calls: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Per agent x ablation x benchmark: the shares of input tokens read from the cache, written to it and
    uncached, and dollars per million input tokens (what the mix costs)."""
    counted = episodes[episodes["status"] != schema.PLANNER_ERROR][["trace_dir", *GROUP]]
    frame = calls.merge(counted, on="trace_dir")
    records = []
    for (agent, ablation, benchmark), rows in _with_pooled(frame):
        total = rows["input_tokens"].sum()
        cached, written = rows["cached_input_tokens"].sum(), rows["cache_write_tokens"].sum()
        records.append(dict(
            agent=agent, ablation=ablation, benchmark=benchmark, n_episodes=rows["trace_dir"].nunique(),
            n_calls=len(rows), input_tokens_total=total,
            cached_pct=100 * cached / total if total else np.nan,
            cache_write_pct=100 * written / total if total else np.nan,
            uncached_pct=100 * (total - cached - written) / total if total else np.nan,
            dollars_per_m_input_tokens=1e6 * rows["dollars"].sum() / total if total else np.nan,
        ))
    columns = [*GROUP, "n_episodes", "n_calls", "input_tokens_total", "cached_pct", "cache_write_pct",
               "uncached_pct", "dollars_per_m_input_tokens"]
    return pd.DataFrame.from_records(records, columns=columns)


def mean_sources_by_call(sources: pd.DataFrame, trace_dirs) -> pd.DataFrame:
    """Mean tokens of each source at each call index over the given episodes still running there,
    indexed by call_index, with `n_episodes` (how many episodes reached that call)."""
    rows = sources[sources["trace_dir"].isin(set(trace_dirs))]
    grouped = rows.groupby("call_index")
    out = grouped[list(INPUT_SOURCES)].mean()
    out["n_episodes"] = grouped.size()
    return out


COLUMN_DOCS = {
    "counted_tokens_per_call": "mean input tokens per call as counted by source (the estimator's tokenizer)",
    "input_tokens_per_call": "mean input tokens per call as recorded (provider usage, or the same estimate)",
    "images_per_call": "mean images in a call's prompt",
    "n_calls": "LLM calls with a token breakdown",
    "input_tokens_total": "input tokens, all calls",
    "cached_pct": "input tokens read from the prefix cache (%)",
    "cache_write_pct": "input tokens written to the cache (%)",
    "uncached_pct": "input tokens billed at the full input price (%)",
    "dollars_per_m_input_tokens": "dollars per million input tokens (output included in the dollars)",
    **{f"{name}_pct": f"{label} (% of input tokens)" for name, label in SOURCE_LABELS.items()},
}


def tables(data, priced: str) -> list:
    """The report's tables of this module (analysis.report.Table), from its ReportData."""
    from analysis.report import Table  # report imports this module

    sources = data.sources if data.sources is not None else pd.DataFrame(
        columns=["trace_dir", "call_index", *INPUT_SOURCES, "n_images", "total"])
    return [
        Table("input_sources", "Where the input tokens go, by source",
              "Every call with a token breakdown (traces of schema v2; planner_error episodes left out), per "
              "agent, ablation and benchmark (All pools the benchmarks). A source's share is its tokens over "
              "all counted input tokens of those calls (long calls weigh more). Sources are counted with the "
              "estimator's tokenizer whatever the planner, so counted_tokens_per_call sits beside the recorded "
              "input_tokens_per_call (equal for estimated usage; for provider usage the gap is the template "
              "difference). Images are one source wherever they sit; the newest observation is the text that "
              "answered the previous call.", shares_table(sources, data.calls, data.episodes)),
        Table("cached_share", "Cached share of input tokens",
              "Every call, per agent, ablation and benchmark (planner_error episodes left out): how much input "
              "the provider's prefix cache served (billed at the cached price), so why dollars fall less than "
              "tokens when one agent re-sends a longer cacheable history. " + priced,
              cached_share_table(data.calls, data.episodes)),
    ]
