"""Tables and views of the traces database, derived from the trace records of agents/records.py.

Tables (one row each):
  episodes    an episode.json: every EpisodeRecord field + trace_dir (package_versions as JSON)
  calls       a calls.jsonl row: episode key columns + every CallRecord field (raw_usage, tool_args as JSON;
              input_sources a STRUCT of InputSources, NULL for traces of schema v1)
  primitives  a primitives.jsonl row: episode key columns + every PrimitiveRecord field
  cells       a cells/cell_NNN.py file: episode key columns, call_index, code and the
              per-cell statistics of analysis.cellstats (CellStats fields)
  prices      the price tables of the config read at ingest (one row per model)
  meta        key/value: analysis_schema, results_root, price_model
  ingest_manifest  trace_dir -> episode.json mtime, for incremental re-ingest

Views:
  call_dollars        trace_dir, call_index, dollars under meta.price_model (NULL without prices)
  instances           every episode but planner_error ones, with whole-episode dollars
  comparison_members  which (agent, ablation) episodes take part in which comparison:
                      each ablation compares tool with code in the same ablation, except
                      tool-only ablations (images_on_demand), compared with code in `full`
  paired              one row per instance and comparison with tool_* and code_* columns
  pairing_problems    duplicate episodes and missing partners, each naming its instance;
                      the report refuses to run while this view has rows
  planner_errors      the episodes that ended in an infrastructure failure
"""
from __future__ import annotations

import json
import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Literal, Union

from agents.records import CallRecord, EpisodeRecord, PrimitiveRecord
from analysis.cellstats import CellStats
from analysis.cost import CALL_DOLLARS_SQL, PriceTable

#: Bump when a table or view changes shape: ingest then rebuilds the database.
ANALYSIS_SCHEMA = 5

#: Episode columns repeated on every child row, so SQL over calls needs no join.
KEY_FIELDS = ("trace_dir", "benchmark", "suite", "task", "seed", "agent", "ablation", "repeat")
#: An instance: pairs of episodes are matched on these plus the comparison.
INSTANCE_FIELDS = ("benchmark", "suite", "task", "seed", "repeat")
#: Ablations run by the tool agent only, and the code ablation each is compared with.
TOOL_ONLY_ABLATIONS = {"images_on_demand": "full"}
PLANNER_ERROR = "planner_error"


def sql_type(tp: object) -> str:
    """DuckDB type of a record field annotation."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return sql_type(inner)
    if origin is Literal:
        return "VARCHAR"
    if tp is bool:
        return "BOOLEAN"
    if tp is int:
        return "BIGINT"
    if tp is float:
        return "DOUBLE"
    if tp is str:
        return "VARCHAR"
    if tp in (dict, list) or origin in (dict, list):
        return "JSON"
    if is_dataclass(tp):  # a nested record: a typed STRUCT, so SQL reads its fields without JSON parsing
        return "STRUCT(" + ", ".join(f'"{name}" {kind}' for name, kind in record_columns(tp)) + ")"
    raise TypeError(f"no DuckDB type for {tp!r}")


def record_columns(cls: type) -> list[tuple[str, str]]:
    hints = typing.get_type_hints(cls)
    return [(f.name, sql_type(hints[f.name])) for f in fields(cls)]


EPISODE_COLUMNS = [("trace_dir", "VARCHAR")] + record_columns(EpisodeRecord)
_episode_types = dict(EPISODE_COLUMNS)
KEY_COLUMNS = [(name, _episode_types[name]) for name in KEY_FIELDS]
CALL_COLUMNS = KEY_COLUMNS + record_columns(CallRecord)
PRIMITIVE_COLUMNS = KEY_COLUMNS + record_columns(PrimitiveRecord)
CELL_COLUMNS = KEY_COLUMNS + [("call_index", "BIGINT"), ("code", "VARCHAR")] + record_columns(CellStats)
PRICE_TABLE_COLUMNS = record_columns(PriceTable)

TABLES: dict[str, list[tuple[str, str]]] = {
    "episodes": EPISODE_COLUMNS,
    "calls": CALL_COLUMNS,
    "primitives": PRIMITIVE_COLUMNS,
    "cells": CELL_COLUMNS,
    "prices": PRICE_TABLE_COLUMNS,
    "meta": [("key", "VARCHAR"), ("value", "VARCHAR")],
    "ingest_manifest": [("trace_dir", "VARCHAR"), ("mtime_ns", "BIGINT")],
}


def create_table_sql(name: str) -> str:
    cols = ",\n  ".join(f'"{c}" {t}' for c, t in TABLES[name])
    return f"CREATE TABLE {name} (\n  {cols}\n)"


def _sql_literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for {value!r}")


def json_lines_select_sql(relation: str, record_cls: type) -> str:
    """SELECT of key columns + a record's typed fields from `relation`(KEY_FIELDS..., _json).

    The lines were checked against the record in Python; a field left out of
    a line takes the record's default.
    """
    structure = json.dumps(dict(record_columns(record_cls)))
    select = []
    for f in fields(record_cls):
        column = f'j."{f.name}"'
        if f.default is not MISSING and f.default is not None:
            column = f"COALESCE({column}, {_sql_literal(f.default)})"
        select.append(f'{column} AS "{f.name}"')
    keys = ", ".join(f'r."{k}"' for k in KEY_FIELDS)
    return (f"SELECT {keys}, {', '.join(select)} "
            f"FROM (SELECT *, json_transform(_json, '{structure}') AS j FROM {relation}) r")


_INSTANCE = ", ".join(INSTANCE_FIELDS)
_TOOL_ONLY_VALUES = ", ".join(f"('{tool}', '{code}')" for tool, code in TOOL_ONLY_ABLATIONS.items())
_PER_AGENT = ("trace_dir", "ablation", "success", "status", "solved_at_call", "n_calls", "input_tokens",
              "cached_input_tokens", "cache_write_tokens", "output_tokens", "dollars")

VIEWS: dict[str, str] = {
    "call_dollars": f"""
SELECT c.trace_dir, c.call_index, {CALL_DOLLARS_SQL} AS dollars
FROM calls c
LEFT JOIN prices p ON p.model = (SELECT value FROM meta WHERE key = 'price_model')""",
    "instances": f"""
SELECT e.trace_dir, e.benchmark, e.suite, e.task, e.seed, e.repeat, e.agent, e.ablation,
       e.success, e.solved_at_call, e.status, e.n_calls, e.input_tokens, e.cached_input_tokens,
       e.cache_write_tokens, e.output_tokens, e.n_acting, e.images_returned, d.dollars
FROM episodes e
LEFT JOIN (SELECT trace_dir, sum(dollars) AS dollars FROM call_dollars GROUP BY trace_dir) d USING (trace_dir)
WHERE e.status <> '{PLANNER_ERROR}'""",
    "comparison_members": f"""
SELECT DISTINCT ablation AS comparison, agent, ablation FROM episodes
WHERE NOT (agent = 'code' AND ablation IN (SELECT tool_ablation FROM (VALUES {_TOOL_ONLY_VALUES}) v(tool_ablation, code_ablation)))
UNION
SELECT tool_ablation AS comparison, 'code' AS agent, code_ablation AS ablation
FROM (VALUES {_TOOL_ONLY_VALUES}) v(tool_ablation, code_ablation)
WHERE tool_ablation IN (SELECT ablation FROM episodes WHERE agent = 'tool')""",
    "paired": f"""
WITH m AS (SELECT m.comparison, i.* FROM instances i JOIN comparison_members m USING (agent, ablation))
SELECT t.comparison, {", ".join("t." + f for f in INSTANCE_FIELDS)},
       {", ".join(f"t.{c} AS tool_{c}" for c in _PER_AGENT)},
       {", ".join(f"c.{c} AS code_{c}" for c in _PER_AGENT)}
FROM m t JOIN m c USING (comparison, {_INSTANCE})
WHERE t.agent = 'tool' AND c.agent = 'code'""",
    "pairing_problems": f"""
WITH m AS (
  SELECT m.comparison, e.* FROM episodes e JOIN comparison_members m USING (agent, ablation)
), dup AS (
  SELECT comparison, {_INSTANCE}, agent, string_agg(trace_dir, ', ' ORDER BY trace_dir) AS dirs
  FROM m WHERE status <> '{PLANNER_ERROR}'
  GROUP BY comparison, {_INSTANCE}, agent HAVING count(*) > 1
), sides AS (
  SELECT comparison, {_INSTANCE},
         bool_or(agent = 'tool' AND status <> '{PLANNER_ERROR}') AS has_tool,
         bool_or(agent = 'code' AND status <> '{PLANNER_ERROR}') AS has_code,
         bool_or(status = '{PLANNER_ERROR}') AS has_planner_error,
         string_agg(trace_dir, ', ' ORDER BY trace_dir) AS dirs
  FROM m GROUP BY comparison, {_INSTANCE}
)
SELECT comparison, {_INSTANCE}, 'duplicate ' || agent || ' episodes: ' || dirs AS problem FROM dup
UNION ALL
SELECT comparison, {_INSTANCE}, 'no code episode to pair with ' || dirs FROM sides
WHERE has_tool AND NOT has_code AND NOT has_planner_error
UNION ALL
SELECT comparison, {_INSTANCE}, 'no tool episode to pair with ' || dirs FROM sides
WHERE has_code AND NOT has_tool AND NOT has_planner_error
  AND comparison NOT IN (SELECT tool_ablation FROM (VALUES {_TOOL_ONLY_VALUES}) v(tool_ablation, code_ablation))
ORDER BY ALL""",
    "planner_errors": f"""
SELECT trace_dir, benchmark, suite, task, seed, repeat, agent, ablation, n_calls, error
FROM episodes WHERE status = '{PLANNER_ERROR}' ORDER BY ALL""",
}


def instance_label(row: dict) -> str:
    """How messages name an instance: `libero_pro libero_spatial_swap/0 seed 3` (+ repeat)."""
    label = f"{row['benchmark']} {row['task']} seed {row['seed']}"
    return label + (f" repeat {row['repeat']}" if row["repeat"] else "")
