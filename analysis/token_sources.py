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
    """trace_dir, call_index, the call's recorded input_tokens, one column per source, n_images, total:
    every call with a breakdown."""
    columns = ", ".join(f"s.{name}" for name in (*INPUT_SOURCES, "n_images", "total"))
    return con.execute(
        f"SELECT trace_dir, call_index, input_tokens, {columns} FROM (SELECT trace_dir, call_index, input_tokens, "
        "input_sources AS s FROM calls WHERE input_sources IS NOT NULL) ORDER BY trace_dir, call_index").df()


def _grouped(frame: pd.DataFrame, episodes: pd.DataFrame, sums: list[str]) -> pd.DataFrame:
    """Sums of `sums`, episodes and calls per agent x ablation x benchmark, then per agent x ablation over
    all benchmarks (benchmark "All") when there are several; planner_error episodes left out, as everywhere
    in the paired analysis.  One vectorised groupby each (10^5 episodes: ~4 x 10^5 calls)."""
    counted = episodes.loc[episodes["status"] != schema.PLANNER_ERROR, ["trace_dir", *GROUP]].set_index("trace_dir")
    rows = frame[["trace_dir", *sums]].join(counted, on="trace_dir", how="inner")

    def per(keys: list[str]) -> pd.DataFrame:
        grouped = rows.groupby(keys, sort=True)
        out = grouped[sums].sum()
        out["n_episodes"] = grouped["trace_dir"].nunique()
        out["n_calls"] = grouped.size()
        return out.reset_index()

    parts = [per(GROUP)]
    if rows["benchmark"].nunique() > 1:
        parts.append(per(["agent", "ablation"]).assign(benchmark=stats.POOLED))
    return pd.concat(parts, ignore_index=True)


def _share(part: pd.Series, whole: pd.Series) -> pd.Series:
    return 100 * part / whole.where(whole > 0)


def shares_table(sources: pd.DataFrame, calls: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Per agent x ablation x benchmark: each source's share of the input tokens (sum of the source over
    sum of the counted totals, so long calls weigh more), tokens per call counted and as recorded.
    (`calls` is not needed: the sources carry each call's recorded input_tokens.)"""
    g = _grouped(sources, episodes, [*INPUT_SOURCES, "n_images", "total", "input_tokens"])
    out = g[[*GROUP, "n_episodes", "n_calls"]].copy()
    n = g["n_calls"].where(g["n_calls"] > 0)
    out["counted_tokens_per_call"] = g["total"] / n
    out["input_tokens_per_call"] = g["input_tokens"] / n
    out["images_per_call"] = g["n_images"] / n
    for name in INPUT_SOURCES:
        out[f"{name}_pct"] = _share(g[name], g["total"])
    return out


def cached_share_table(calls: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Per agent x ablation x benchmark: the shares of input tokens read from the cache, written to it and
    uncached, and dollars per million input tokens (what the mix costs)."""
    g = _grouped(calls, episodes, ["input_tokens", "cached_input_tokens", "cache_write_tokens", "dollars"])
    out = g[[*GROUP, "n_episodes", "n_calls"]].copy()
    total = g["input_tokens"]
    out["input_tokens_total"] = total
    out["cached_pct"] = _share(g["cached_input_tokens"], total)
    out["cache_write_pct"] = _share(g["cache_write_tokens"], total)
    out["uncached_pct"] = _share(total - g["cached_input_tokens"] - g["cache_write_tokens"], total)
    out["dollars_per_m_input_tokens"] = 1e6 * g["dollars"] / total.where(total > 0)
    return out


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
        {c: pd.Series(dtype="int64") for c in ["call_index", "input_tokens", *INPUT_SOURCES, "n_images", "total"]}
        | {"trace_dir": pd.Series(dtype="object")})
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
