"""Load every complete episode trace below a results folder into the DuckDB traces database.

A trace directory is complete when it holds `episode.json` (written last,
atomically).  A directory with `calls.jsonl` but no `episode.json` is an
episode still running or one that crashed: it is reported and skipped.  A
complete trace whose files do not parse or do not match the records of
agents/records.py is reported with the file (and line) and skipped whole:
an episode is loaded with all its calls, primitives and cells, or not at all.

Re-ingest is incremental and idempotent: the database remembers each trace's
episode.json mtime; unchanged traces are kept, changed ones reloaded, vanished
ones removed.  A different results folder or a new analysis schema rebuilds
from scratch.  Parsing runs in worker processes when there are many traces;
the database is written by this process only, one transaction per batch of
traces (a trace is loaded whole or not at all).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import sys
import time
import typing
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import MISSING, astuple, dataclass, field, fields, replace
from operator import attrgetter
from pathlib import Path
from typing import Any, Iterable

import duckdb
import pandas as pd

from agents.errors import CellbenchError
from agents.records import CallRecord, EpisodeRecord, PrimitiveRecord
from analysis import schema
from analysis.cellstats import CELL_STATS_FIELDS, STORED_STATS_FILE, episode_cell_stats, stats_from_stored
from analysis.cost import PriceTable

EPISODE_FILE = "episode.json"
#: The record of an episode the LLM endpoint never let finish (agents/trace.py): loaded, so that
#: the report lists it, though the episode is incomplete and the workflow re-runs it.
PLANNER_ERROR_FILE = "planner_error.json"
CALLS_FILE = "calls.jsonl"
PRIMITIVES_FILE = "primitives.jsonl"
CELLS_DIR = "cells"
#: A trace's own folders, never traces themselves (work/: the runtime's working directory, files cells wrote).
_TRACE_CONTENT_DIRS = frozenset({CELLS_DIR, "images", "work"})
_CELL_NAME = re.compile(r"^cell_(\d+)\.py$")
#: Below this many traces to parse, worker processes cost more than they save.
_PARALLEL_THRESHOLD = 2000
_CHUNK = 500
#: Traces per write transaction: few enough to bound memory, many enough that commits cost little.
_COMMIT_EVERY = 5000
#: DuckDB's own cap (its default is 80% of RAM); ingest needs far less, and it
#: shares the machine with episodes.
_MEMORY_LIMIT = "512MB"


class TraceError(Exception):
    """A complete trace that cannot be loaded; the message names the file."""


@dataclass
class IngestSummary:
    db_path: str
    results_root: str
    loaded: int = 0
    """Traces parsed and written by this run."""
    unchanged: int = 0
    removed: int = 0
    total: int = 0
    """Episodes in the database afterwards."""
    incomplete: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """One message per trace skipped as corrupt, naming the file."""
    rebuilt: bool = False
    seconds: float = 0.0


# ---------------------------------------------------------------------------
# Finding traces


def find_trace_dirs(results_root: str | Path) -> tuple[list[str], list[str]]:
    """(complete, incomplete) trace directories below `results_root`, at any depth, sorted.

    A directory holding episode.json is a complete trace, one holding
    calls.jsonl without it an incomplete one.  Traces may nest (repeats live
    in `seed0/r1` below the repeat-0 trace), so the walk goes on below them,
    skipping only a trace's own `cells/` and `images/` folders.
    """
    root = str(results_root)
    if not os.path.isdir(root):
        raise CellbenchError(f"results folder {root} not found (run some episodes first)")
    complete: list[str] = []
    incomplete: list[str] = []
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError as e:
            raise CellbenchError(f"cannot read {path}: {e.strerror}") from None
        names = {e.name for e in entries}
        skip: frozenset[str] = frozenset()
        if EPISODE_FILE in names or PLANNER_ERROR_FILE in names:
            complete.append(path)
            skip = _TRACE_CONTENT_DIRS
        elif CALLS_FILE in names:
            incomplete.append(path)
            skip = _TRACE_CONTENT_DIRS
        stack.extend(e.path for e in entries if e.name not in skip and e.is_dir(follow_symlinks=False))
    return sorted(complete), sorted(incomplete)


# ---------------------------------------------------------------------------
# Reading one trace


_MISSING = object()
_PY_TYPES = {"BIGINT": (int,), "DOUBLE": (int, float), "BOOLEAN": (bool,), "VARCHAR": (str,), "JSON": (dict, list)}


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    allowed: tuple[type, ...]
    default: Any
    is_json: bool


def _field_specs(cls: type) -> tuple[_FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    specs = []
    for f, (name, sql) in zip(fields(cls), schema.record_columns(cls)):
        allowed = (dict,) if sql.startswith("STRUCT") else _PY_TYPES[sql]
        if type(None) in typing.get_args(hints[name]):
            allowed = allowed + (type(None),)
        default = f.default if f.default is not MISSING else _MISSING
        specs.append(_FieldSpec(name, allowed, default, sql == "JSON" or sql.startswith("STRUCT")))
    return tuple(specs)


_EPISODE_SPECS = _field_specs(EpisodeRecord)
_CALL_SPECS = _field_specs(CallRecord)
_PRIMITIVE_SPECS = _field_specs(PrimitiveRecord)


def _record_row(record: Any, specs: tuple[_FieldSpec, ...], where: str) -> list[Any]:
    """A record's values in column order, type-checked against agents/records.py."""
    if not isinstance(record, dict):
        raise TraceError(f"{where}: expected a JSON object, got {type(record).__name__}")
    row = []
    for spec in specs:
        value = record.get(spec.name, _MISSING)
        if value is _MISSING:
            if spec.default is _MISSING:
                raise TraceError(f"{where}: missing field {spec.name!r}")
            value = spec.default
        elif type(value) not in spec.allowed:
            raise TraceError(f"{where}: field {spec.name!r} is {type(value).__name__} "
                             f"{str(value)[:40]!r}, expected {'/'.join(t.__name__ for t in spec.allowed)}")
        if spec.is_json and value is not None:
            value = json.dumps(value, sort_keys=True)
        row.append(value)
    return row


class _RecordCheck:
    """Checks JSONL rows against a record class; millions of rows, so the common case is a few C-level calls.

    A row whose field count and value types were seen valid before passes at
    once; anything else goes through `_record_row`.  A missing field reads as
    None here, so traces written before a defaulted field existed take the
    fast path too (the price: a row lacking a nullable field and having one
    more unknown field can pass as if the first were null).
    """

    def __init__(self, cls: type):
        self.specs = _field_specs(cls)
        self._names = tuple(s.name for s in self.specs)
        self._valid_signatures: set[tuple] = set()

    def check(self, record: Any, where: str) -> None:
        if type(record) is not dict:
            _record_row(record, self.specs, where)
            return
        signature = (len(record), *map(type, map(record.get, self._names)))
        if signature not in self._valid_signatures:
            _record_row(record, self.specs, where)
            self._valid_signatures.add(signature)


_CALL_CHECK = _RecordCheck(CallRecord)
# dataclasses.astuple deep-copies every value: too slow for 10^5 cells.
_cell_stat_values = attrgetter(*CELL_STATS_FIELDS)
_PRIMITIVE_CHECK = _RecordCheck(PrimitiveRecord)


def _jsonl_lines(path: str) -> list[tuple[int, str, Any]]:
    """(line number, line text, parsed object) of every non-empty line; a missing file is empty."""
    try:
        with open(path, encoding="utf-8") as f:
            numbered = [(n, line) for n, line in enumerate(f.read().splitlines(), 1) if line.strip()]
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: unreadable: {e}") from None
    # One parse of the whole file as an array is ~20% cheaper than one per line;
    # any doubt (a parse error, or lines that do not map one-to-one) goes line by line.
    try:
        parsed = json.loads("[" + ",".join(line for _, line in numbered) + "]")
        if len(parsed) == len(numbered):
            return [(n, line, obj) for (n, line), obj in zip(numbered, parsed)]
    except json.JSONDecodeError:
        pass
    out = []
    for number, line in numbered:
        try:
            out.append((number, line, json.loads(line)))
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}:{number}: not valid JSON ({e.msg}; truncated write?)") from None
    raise TraceError(f"{path}: lines do not each hold one JSON value")


@dataclass
class TraceRows:
    """One episode's rows, ready for the database.

    `calls` and `primitives` rows are the episode key columns plus the checked
    JSON line; DuckDB turns the line into typed columns (`json_insert_sql`),
    which is much faster than re-serialising nested objects in Python.
    """

    trace_dir: str
    mtime_ns: int
    episode: list[Any]
    calls: list[list[Any]]
    primitives: list[list[Any]]
    cells: list[list[Any]]


def _record_path(trace_dir: str) -> str:
    path = os.path.join(trace_dir, EPISODE_FILE)
    return path if os.path.exists(path) else os.path.join(trace_dir, PLANNER_ERROR_FILE)


def read_trace_dir(trace_dir: str) -> TraceRows:
    """Parse and check one complete trace directory; TraceError names the bad file."""
    episode_path = _record_path(trace_dir)
    try:
        mtime_ns = os.stat(episode_path).st_mtime_ns
        with open(episode_path, encoding="utf-8") as f:
            episode = json.load(f)
    except json.JSONDecodeError as e:
        raise TraceError(f"{episode_path}: not valid JSON ({e.msg} at line {e.lineno}; truncated write?)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{episode_path}: unreadable: {e}") from None
    episode_row = [trace_dir] + _record_row(episode, _EPISODE_SPECS, episode_path)
    by_name = dict(zip((c for c, _ in schema.EPISODE_COLUMNS), episode_row))
    keys = [by_name[k] for k in schema.KEY_FIELDS]

    calls_path = os.path.join(trace_dir, CALLS_FILE)
    calls = []
    noticed: set[int] = set()  # cells whose worker saw them try to leave the API
    for number, line, rec in _jsonl_lines(calls_path):
        _CALL_CHECK.check(rec, f"{calls_path}:{number}")
        calls.append(keys + [line])
        if rec.get("left_api"):
            noticed.add(rec["call_index"])
    primitives_path = os.path.join(trace_dir, PRIMITIVES_FILE)
    primitives = []
    executed: dict[int, list[tuple[str, bool]]] = {}
    for number, line, rec in _jsonl_lines(primitives_path):
        _PRIMITIVE_CHECK.check(rec, f"{primitives_path}:{number}")
        primitives.append(keys + [line])
        executed.setdefault(rec["call_index"], []).append((rec["name"], rec["acting"]))

    cells = []
    cells_dir = os.path.join(trace_dir, CELLS_DIR)
    if os.path.isdir(cells_dir):
        sources = []
        for name in sorted(os.listdir(cells_dir)):
            m = _CELL_NAME.match(name)
            if not m:
                continue
            path = os.path.join(cells_dir, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    sources.append((int(m.group(1)), f.read()))
            except OSError as e:
                raise TraceError(f"{path}: unreadable: {e}") from None
        stats = _stored_cell_stats(cells_dir, sources, executed) or episode_cell_stats(sources, executed)
        stats = [replace(st, left_api=True) if i in noticed else st for (i, _), st in zip(sorted(sources), stats)]
        cells = [keys + [call_index, source] + list(_cell_stat_values(s))
                 for (call_index, source), s in zip(sorted(sources), stats)]
    return TraceRows(trace_dir, mtime_ns, episode_row, calls, primitives, cells)


def _stored_cell_stats(cells_dir: str, sources: list[tuple[int, str]],
                       executed: dict[int, list[tuple[str, bool]]]):
    """The episode's cells/stats.json when it is current for these cells, else None (then computed)."""
    if not sources:
        return None
    try:
        with open(os.path.join(cells_dir, STORED_STATS_FILE), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return stats_from_stored(doc, sources, executed)


def _read_chunk(trace_dirs: list[str]) -> tuple[list[TraceRows], list[str]]:
    rows, problems = [], []
    for d in trace_dirs:
        try:
            rows.append(read_trace_dir(d))
        except TraceError as e:
            problems.append(str(e))
    return rows, problems


# ---------------------------------------------------------------------------
# Writing the database


def _connect(db_path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(db_path), read_only=read_only)
    except duckdb.Error as e:
        raise CellbenchError(f"cannot open database {db_path}: {e}") from None


def _meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    except duckdb.CatalogException:
        return {}


def _recreate_tables(con: duckdb.DuckDBPyConnection) -> None:
    for view in schema.VIEWS:
        con.execute(f"DROP VIEW IF EXISTS {view}")
    for table in schema.TABLES:
        con.execute(f"DROP TABLE IF EXISTS {table}")
        con.execute(schema.create_table_sql(table))


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[list[Any]]) -> None:
    if not rows:
        return
    frame = pd.DataFrame.from_records(rows, columns=[c for c, _ in schema.TABLES[table]])
    con.register("_rows", frame)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM _rows")
    finally:
        con.unregister("_rows")


def _insert_json_lines(con: duckdb.DuckDBPyConnection, table: str, record_cls: type, rows: list[list[Any]]) -> None:
    if not rows:
        return
    frame = pd.DataFrame.from_records(rows, columns=[*schema.KEY_FIELDS, "_json"])
    con.register("_rows", frame)
    try:
        con.execute(f"INSERT INTO {table} {schema.json_lines_select_sql('_rows', record_cls)}")
    finally:
        con.unregister("_rows")


def _write_traces(con: duckdb.DuckDBPyConnection, traces: list[TraceRows]) -> None:
    _insert(con, "episodes", [t.episode for t in traces])
    _insert_json_lines(con, "calls", CallRecord, [r for t in traces for r in t.calls])
    _insert_json_lines(con, "primitives", PrimitiveRecord, [r for t in traces for r in t.primitives])
    _insert(con, "cells", [r for t in traces for r in t.cells])
    _insert(con, "ingest_manifest", [[t.trace_dir, t.mtime_ns] for t in traces])


def _delete_traces(con: duckdb.DuckDBPyConnection, trace_dirs: Iterable[str]) -> None:
    frame = pd.DataFrame({"trace_dir": list(trace_dirs)})
    if frame.empty:
        return
    con.register("_gone", frame)
    try:
        for table in ("episodes", "calls", "primitives", "cells", "ingest_manifest"):
            con.execute(f"DELETE FROM {table} WHERE trace_dir IN (SELECT trace_dir FROM _gone)")
    finally:
        con.unregister("_gone")


def _write_prices(con: duckdb.DuckDBPyConnection, tables: dict[str, PriceTable], price_model: str | None) -> None:
    con.execute("DELETE FROM prices")
    _insert(con, "prices", [list(astuple(t)) for t in tables.values()])
    con.execute("DELETE FROM meta WHERE key = 'price_model'")
    if price_model:
        con.execute("INSERT INTO meta VALUES ('price_model', ?)", [price_model])


def _bounded_map(pool: ProcessPoolExecutor, fn, items: list, ahead: int):
    """pool.map in order, with at most `ahead` results pending: Executor.map submits every item at
    once, and parsed chunks then pile up in memory while this process writes the database."""
    pending: deque = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


@contextmanager
def _transaction(con: duckdb.DuckDBPyConnection):
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def _default_workers() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def ingest_traces(results_root: str | Path, db_path: str | Path, *,
                  prices: tuple[dict[str, PriceTable], str | None] | None = None,
                  workers: int | None = None) -> IngestSummary:
    """Bring the database at `db_path` up to date with the traces below `results_root`.

    `prices` = (tables by model, default model): stored for the database's
    dollar views; None keeps what an earlier ingest stored.  `workers`: parsing
    processes (default: the CPUs this process may use).
    """
    started = time.perf_counter()
    summary = IngestSummary(db_path=str(db_path), results_root=str(results_root))
    complete, summary.incomplete = find_trace_dirs(results_root)
    found = {d: os.stat(_record_path(d)).st_mtime_ns for d in complete}

    Path(db_path).parent.mkdir(parents=True, exist_ok=True)
    root_id = os.path.abspath(results_root)
    with _connect(db_path) as probe:
        meta = _meta(probe)
        rebuild = (meta.get("analysis_schema") != str(schema.ANALYSIS_SCHEMA)
                   or meta.get("results_root") != root_id)
        known = {} if rebuild else dict(probe.execute("SELECT trace_dir, mtime_ns FROM ingest_manifest").fetchall())
    stale = [d for d, mtime in known.items() if found.get(d) != mtime]
    to_load = [d for d in complete if known.get(d) != found[d]]
    summary.unchanged = len(complete) - len(to_load)
    summary.removed = len([d for d in known if d not in found])
    summary.rebuilt = rebuild

    chunks = [to_load[i:i + _CHUNK] for i in range(0, len(to_load), _CHUNK)]
    workers = _default_workers() if workers is None else workers
    with ExitStack() as stack:
        if workers > 1 and len(to_load) >= _PARALLEL_THRESHOLD:
            # Fork (workers inherit the imported modules) before any DuckDB
            # connection is open: a fork copies no threads but their locks.
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            pool = stack.enter_context(ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)))
            parsed = _bounded_map(pool, _read_chunk, chunks, ahead=2 * workers)
        else:
            parsed = map(_read_chunk, chunks)
        con = stack.enter_context(_connect(db_path))
        con.execute(f"SET memory_limit = '{_MEMORY_LIMIT}'")
        # One transaction for the tables, views, prices and removals, then one
        # per batch of traces (their rows and manifest entries together): memory
        # stays bounded at any scale (one transaction over 10^5 traces held
        # ~2 GB), and an ingest that is killed keeps the batches it finished;
        # the next run loads only the rest.
        with _transaction(con):
            if rebuild:
                _recreate_tables(con)
                con.execute("INSERT INTO meta VALUES ('analysis_schema', ?), ('results_root', ?)",
                            [str(schema.ANALYSIS_SCHEMA), root_id])
            _delete_traces(con, stale)
            if prices is not None:
                _write_prices(con, *prices)
            for view, sql in schema.VIEWS.items():
                con.execute(f"CREATE OR REPLACE VIEW {view} AS {sql}")
        batch: list[TraceRows] = []
        for traces, problems in parsed:
            batch += traces
            summary.problems.extend(problems)
            if len(batch) >= _COMMIT_EVERY:
                with _transaction(con):
                    _write_traces(con, batch)
                summary.loaded += len(batch)
                batch = []
        with _transaction(con):
            _write_traces(con, batch)
        summary.loaded += len(batch)
        (summary.total,), = con.execute("SELECT count(*) FROM episodes").fetchall()
    summary.seconds = time.perf_counter() - started
    return summary


def print_summary(summary: IngestSummary, stream=None) -> None:
    stream = stream or sys.stderr
    for path in summary.incomplete:
        print(f"skipped incomplete trace (no {EPISODE_FILE}): {path}", file=stream)
    for message in summary.problems:
        print(f"skipped corrupt trace: {message}", file=stream)
    print(f"ingest: {summary.total} episodes in {summary.db_path} "
          f"({summary.loaded} loaded, {summary.unchanged} unchanged, {summary.removed} removed"
          f"{', rebuilt' if summary.rebuilt else ''}; {len(summary.incomplete)} incomplete, "
          f"{len(summary.problems)} corrupt skipped) in {summary.seconds:.1f} s", file=stream)
