"""`cellbench estimate`: what a grid will cost, before any of its episodes runs, from the traces on disk.

The grid comes from the config (config.yaml with any --configfile merged over
it, as Snakemake merges them).  Each of its cells (benchmark x agent x
ablation) is projected from the complete traces already on disk (a pilot run,
or the scripted planner's estimated usage, marked as such): per episode, the
mean LLM calls, input tokens (cached share) and dollars over the pilot's
instances, times the cell's episode count, with the pilot's spread (the
cheapest and dearest instance) beside it.  A cell no pilot trace matches
borrows from the same agent and ablation in another benchmark group, then
from the same agent (the basis column says which).  Dollars come from
analysis.cost's one formula, under each requested price table (the config's
`prices`, else the genai-prices library: analysis.price_library).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from agents.errors import CellbenchError
from analysis.cost import call_dollars
from analysis.price_library import TableSource, resolve_price_table

_EPISODE_COLUMNS = {"benchmark": "VARCHAR", "agent": "VARCHAR", "ablation": "VARCHAR", "task": "VARCHAR",
                    "seed": "BIGINT", "status": "VARCHAR", "planner": "VARCHAR", "model": "VARCHAR",
                    "call_budget": "BIGINT"}
_CALL_COLUMNS = {"call_index": "BIGINT", "input_tokens": "BIGINT", "cached_input_tokens": "BIGINT",
                 "cache_write_tokens": "BIGINT", "output_tokens": "BIGINT", "usage_source": "VARCHAR"}


def load_grid_config(base: str | None, configfiles: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The config Snakemake would run: `base` (if it exists) with each configfile merged over it, validated."""
    import yaml
    from snakemake.utils import update_config

    from agents.config import validate_config

    sources = [p for p in ([base] if base and Path(base).is_file() else []) + list(configfiles)]
    if not sources:
        raise CellbenchError("no config: pass --configfile FILE (or run where config.yaml is)")
    merged: dict[str, Any] = {}
    for path in sources:
        try:
            with open(path) as f:
                update_config(merged, yaml.safe_load(f) or {})
        except FileNotFoundError:
            raise CellbenchError(f"{path}: config file not found") from None
    return validate_config(merged, sources=sources), sources


def pilot_episodes(results: str | Path, tables: list[TableSource]) -> pd.DataFrame:
    """One row per complete pilot trace below `results` (planner errors left out): its totals and dollars."""
    results = Path(results)
    if not results.is_dir() or next(results.rglob("episode.json"), None) is None:
        return pd.DataFrame()
    con = duckdb.connect()
    root = str(results).rstrip("/")
    con.execute(f"""CREATE TABLE episodes AS
        SELECT parse_dirpath(filename) AS trace_dir, *
        FROM read_json(?, columns = {_EPISODE_COLUMNS}, filename = true)
        WHERE status <> 'planner_error'""", [f"{root}/**/episode.json"])
    if next(results.rglob("calls.jsonl"), None) is None:  # episodes without a call (read_json refuses no files)
        columns = ", ".join(f"{name} {kind}" for name, kind in _CALL_COLUMNS.items())
        con.execute(f"CREATE TABLE calls (trace_dir VARCHAR, {columns})")
    else:
        con.execute(f"""CREATE TABLE calls AS
            SELECT parse_dirpath(filename) AS trace_dir, * EXCLUDE (filename)
            FROM read_json(?, columns = {_CALL_COLUMNS}, format = 'newline_delimited', filename = true)
            WHERE parse_dirpath(filename) IN (SELECT trace_dir FROM episodes)""", [f"{root}/**/calls.jsonl"])
    frame = con.execute("""
        SELECT e.trace_dir, e.benchmark, e.agent, e.ablation, e.task, e.seed, e.planner, e.model, e.call_budget,
               count(c.call_index) AS calls, coalesce(sum(c.input_tokens), 0) AS input_tokens,
               coalesce(sum(c.cached_input_tokens), 0) AS cached_input_tokens,
               coalesce(sum(c.cache_write_tokens), 0) AS cache_write_tokens,
               coalesce(sum(c.output_tokens), 0) AS output_tokens,
               coalesce(min(c.usage_source), 'none') AS usage_source
        FROM episodes e LEFT JOIN calls c USING (trace_dir)
        GROUP BY ALL ORDER BY e.trace_dir""").df()
    for source in tables:
        dollars = call_dollars(con, source.table).groupby("trace_dir")["dollars"].sum()
        frame[f"$ {source.table.model}"] = frame["trace_dir"].map(dollars).fillna(0.0)
    return frame


@dataclass
class CellProjection:
    benchmark: str
    agent: str
    ablation: str
    episodes: int
    call_budget: int
    basis: str
    """'pilot (n)', or the proxy it borrowed from."""
    pilot: pd.DataFrame


def project(config: dict[str, Any], pilot: pd.DataFrame) -> list[CellProjection]:
    """One projection per cell of the config's grid."""
    from agents.config import episode_grid

    counts = Counter((e["benchmark"], e["agent"], e["ablation"]) for e in episode_grid(config))
    budgets = {b: g["call_budget"] for b, g in config["benchmarks"].items()}
    out = []
    for (benchmark, agent, ablation), n in counts.items():
        rows, basis = _match(pilot, benchmark, agent, ablation)
        out.append(CellProjection(benchmark, agent, ablation, n, budgets[benchmark], basis, rows))
    return out


def _match(pilot: pd.DataFrame, benchmark: str, agent: str, ablation: str) -> tuple[pd.DataFrame, str]:
    if pilot.empty:
        return pilot, "no pilot"
    same = pilot[(pilot.agent == agent) & (pilot.ablation == ablation)]
    exact = same[same.benchmark == benchmark]
    if len(exact):
        return exact, f"pilot ({len(exact)})"
    if len(same):
        return same, f"proxy: {'+'.join(sorted(set(same.benchmark)))} ({len(same)})"
    by_agent = pilot[pilot.agent == agent]
    if len(by_agent):
        return by_agent, f"proxy: {agent}, every ablation ({len(by_agent)})"
    return pilot.iloc[0:0], "no pilot"


def usage_note(pilot: pd.DataFrame) -> str:
    """How the pilot's token counts were obtained."""
    if pilot.empty:
        return "no pilot traces"
    sources = set(pilot.usage_source)
    planners = ", ".join(sorted(set(pilot.planner + "/" + pilot.model)))
    if sources == {"estimated"}:
        return f"usage ESTIMATED from the prompts ({planners}), not measured"
    if sources == {"provider"}:
        return f"provider-reported usage ({planners})"
    return f"mixed usage sources {sorted(sources)} ({planners})"


def render(config_label: str, cells: list[CellProjection], tables: list[TableSource], pilot: pd.DataFrame,
           results: str) -> str:
    """The estimate as a text table, one line per cell, totals last."""
    money = [f"$ {t.table.model}" for t in tables]
    header = (f"{'benchmark':<18} {'agent':<5} {'ablation':<17} {'episodes':>8} {'LLM calls':>10} "
              f"{'input tokens':>14} {'cached':>6}" + "".join(f" {m[2:]:>26}" for m in money) + "  basis")
    lines = [f"cellbench estimate: {config_label}: {sum(c.episodes for c in cells):,} episodes; "
             f"pilot: {len(pilot)} traces in {results} ({usage_note(pilot)})",
             "dollars: total [per episode: cheapest-dearest pilot instance]; price tables: "
             + "; ".join(f"{t.table.model} from {t.origin}" for t in tables), "", header]
    totals = {"calls": 0.0, "input": 0.0, "cached": 0.0, **{m: 0.0 for m in money}}
    for c in sorted(cells, key=lambda c: (c.benchmark, c.agent, c.ablation)):
        row = f"{c.benchmark:<18} {c.agent:<5} {c.ablation:<17} {c.episodes:>8,}"
        if c.pilot.empty:
            lines.append(row + "  (no pilot trace to project from)")
            continue
        p, n = c.pilot, c.episodes
        calls, inp, cached = n * p.calls.mean(), n * p.input_tokens.mean(), n * p.cached_input_tokens.mean()
        totals["calls"] += calls
        totals["input"] += inp
        totals["cached"] += cached
        row += f" {calls:>10,.0f} {inp:>14,.0f} {cached / inp if inp else 0:>6.0%}"
        for m in money:
            totals[m] += n * p[m].mean()
            row += f" {_dollars(n * p[m].mean()):>10} [{_dollars(p[m].min())}-{_dollars(p[m].max())}]".rjust(27)
        lines.append(row + f"  {c.basis}")
    share = totals["cached"] / totals["input"] if totals["input"] else 0
    lines.append(f"{'total':<42} {sum(c.episodes for c in cells):>8,} {totals['calls']:>10,.0f} "
                 f"{totals['input']:>14,.0f} {share:>6.0%}" + "".join(f" {_dollars(totals[m]):>26}" for m in money))
    return "\n".join(lines)


def _dollars(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}" if x >= 0.1 else f"${x:.4f}"


def projection_line(config: dict[str, Any], results: str = "results/episodes") -> str:
    """One line for the workflow to print before a paid planner's grid starts."""
    tables = [resolve_price_table(config, config["price_model"])]
    pilot = pilot_episodes(results, tables)
    cells = project(config, pilot)
    n = sum(c.episodes for c in cells)
    if pilot.empty:
        return f"cellbench: {n:,} episodes; no traces in {results} to project their cost from (cellbench estimate)"
    covered = [c for c in cells if not c.pilot.empty]
    money = f"$ {tables[0].table.model}"
    calls = sum(c.episodes * c.pilot.calls.mean() for c in covered)
    inp = sum(c.episodes * c.pilot.input_tokens.mean() for c in covered)
    cached = sum(c.episodes * c.pilot.cached_input_tokens.mean() for c in covered)
    dollars = sum(c.episodes * c.pilot[money].mean() for c in covered)
    return (f"cellbench: projected for {n:,} episodes under {tables[0].table.model}: {calls:,.0f} LLM calls, "
            f"{inp:,.0f} input tokens ({cached / inp if inp else 0:.0%} cached), {_dollars(dollars)} "
            f"(from {len(pilot)} traces in {results}, {usage_note(pilot)}; cellbench estimate for the table)")


def main_estimate(args: argparse.Namespace) -> int:
    config, sources = load_grid_config(args.config, args.configfile or [])
    names = args.price or [config["price_model"]]
    tables = [resolve_price_table(config, name) for name in dict.fromkeys(names)]
    pilot = pilot_episodes(args.results, tables)
    if pilot.empty:
        print(f"cellbench estimate: no complete traces below {args.results}: run a pilot first "
              f"(e.g. `make reproduce`, the scripted planner's default grid), then estimate", file=sys.stderr)
        return 1
    print(render(" + ".join(sources), project(config, pilot), tables, pilot, args.results))
    return 0
